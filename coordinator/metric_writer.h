// Group commit of aggregated metric rows: callers stage rows without
// touching the disk, one flusher thread writes everything staged in one
// transaction (Store::PutMetrics), then runs the callbacks of the
// callers whose rows (or whose wait) that transaction covered.
//
// Contract:
//  - Stage(row, done): `row` replaces any staged, not yet committed row of
//    the same (job_id, step), so per-rank rewrites of one step's aggregate
//    collapse into one row. `done` runs once, after a commit that includes
//    this row or a newer one of the same key, with OK; or with UNAVAILABLE
//    when that commit failed.
//  - Stage(nullopt, done): no row; `done` runs after the next commit, which
//    covers every row staged before this call (or still in flight).
//  - So when `done` gets OK, every row staged before the Stage call that
//    registered it is committed: an acknowledged report is durable.
//  - Rows of a failed commit are staged again (unless a newer row of the
//    same key was staged meanwhile) and retried with the next batch; the
//    flusher retries only when a new Stage call arrives (no busy loop).
//  - Batching is natural (no timer): while one transaction runs, new rows
//    accumulate for the next, so the batch grows with the load and an idle
//    writer commits a lone row at once.
//  - Callbacks run on the flusher thread without any lock of this class
//    held; they must be short and must not block (they may call Stage).
//  - `committed` (optional, Create's) sees every batch of rows after its
//    commit succeeded, on the flusher thread, before the callbacks: for
//    readers of the history that must not hold up reporters (TensorBoard
//    files). It must not call Stage.
//  - The destructor commits what is staged, runs the remaining callbacks,
//    and joins the thread. Stage after destruction began is a bug.
//  - Bounded: backlog_bytes() counts the rows staged or in a commit (each
//    row's job id and aggregate, plus kRowOverhead). While the store fails
//    they stay, so the owner asks Full() (backlog >= Create's
//    max_backlog_bytes) before it aggregates a report and, when full,
//    records none: it answers UNAVAILABLE and the reporter sends the report
//    again (an acknowledged report is still durable; nothing acknowledged
//    is dropped). Stage itself never refuses. last_error() is the newest
//    failed commit's error as the store gave it (OK once a commit
//    succeeds).
//
// Thread safety: thread-safe; one absl::Mutex (mu_) guards the staging area
// (the backlog's byte count is an atomic changed under it, so that Full()
// takes no lock),
// the flusher thread alone talks to the Store. Callers may hold their own
// locks while calling Stage (it never waits on the disk), which is how the
// Coordinator keeps stage order equal to aggregation order.
#ifndef FRAMEWORM_COORDINATOR_METRIC_WRITER_H_
#define FRAMEWORM_COORDINATOR_METRIC_WRITER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store.h"

namespace frameworm::coordinator {

class MetricWriter {
 public:
  using Done = std::function<void(absl::Status)>;
  using Committed = std::function<void(const std::vector<MetricRow>&)>;

  static constexpr int64_t kDefaultMaxBacklogBytes = int64_t{64} << 20;
  static constexpr int64_t kRowOverhead = 64;

  // `store` is not owned and must outlive the writer. Starts the flusher.
  static std::unique_ptr<MetricWriter> Create(
      Store* store, Committed committed = nullptr,
      int64_t max_backlog_bytes = kDefaultMaxBacklogBytes);
  ~MetricWriter();
  MetricWriter(const MetricWriter&) = delete;
  MetricWriter& operator=(const MetricWriter&) = delete;

  void Stage(std::optional<MetricRow> row, Done done);

  // Number of commits attempted so far (for tests).
  int64_t commits() const;
  int64_t backlog_bytes() const { return backlog_bytes_.load(std::memory_order_relaxed); }
  int64_t max_backlog_bytes() const { return max_backlog_bytes_; }
  bool Full() const;
  absl::Status last_error() const;

 private:
  MetricWriter(Store* store, Committed committed, int64_t max_backlog_bytes)
      : store_(store), committed_(std::move(committed)), max_backlog_bytes_(max_backlog_bytes) {}
  void Run();
  static int64_t Bytes(const MetricRow& row) {
    return static_cast<int64_t>(row.job_id.size() + row.aggregate.size()) + kRowOverhead;
  }

  Store* const store_;
  const Committed committed_;
  const int64_t max_backlog_bytes_;

  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int64_t>, MetricRow> staged_
      ABSL_GUARDED_BY(mu_);
  std::vector<Done> waiters_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of staged_
  // staged_bytes_ plus the bytes of the commit running: changed under mu_,
  // read without it (Full() is asked for every step report).
  std::atomic<int64_t> backlog_bytes_{0};
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // started last, joined in the destructor
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_METRIC_WRITER_H_
