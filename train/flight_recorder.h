// A collective flight recorder: a fixed-size ring of this rank's last
// collectives, in the order it issued them.
//
// Every collective the distributed trainer issues (the gradient buckets'
// allreduces, the used-parameter map, the metric allreduce, the step-action
// and parameter broadcasts, the intra-node shared-memory sums) gets the next
// sequence number when it is enqueued. c10d requires every rank to issue
// the same collectives in the same order, so sequence number s names the
// same collective on every rank: when a generation stalls, comparing the
// ranks' highest enqueued and completed numbers tells which rank never
// reached the collective the others wait in (the coordinator does that:
// coordinator/collective_view.h).
//
// Each record holds the op ("allreduce", "broadcast", "allreduce(shm)"),
// what it carries ("gradients", "metrics", ...), the gradient bucket (-1:
// none), the bytes, and three times on this process's steady clock:
// enqueued (issued to the backend), started (the training thread began to
// wait for it; the CPU backends do not say when the transfer itself
// starts) and ended (the wait returned or threw); and the state. On NCCL a
// wait returns once the compute stream is ordered after the collective, so
// there "completed" means handed to the GPU in order, not finished on it
// (a rank stuck on the device shows at its next host sync); device-side
// completion (CUDA events) is not recorded.
//
// Cost: one uncontended mutex and one clock read per event, a few events
// per step (bench/results/p10_recorder.md). capacity 0 turns it off:
// Enqueue returns 0 and nothing is kept.
//
// Thread safety: every method may be called from any thread (the reducer
// enqueues from autograd threads, the liveness pinger reads).
#ifndef FRAMEWORM_TRAIN_FLIGHT_RECORDER_H_
#define FRAMEWORM_TRAIN_FLIGHT_RECORDER_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace frameworm {

enum class CollectiveState { kEnqueued, kStarted, kCompleted, kFailed };
const char* CollectiveStateName(CollectiveState s);

struct CollectiveRecord {
  int64_t seq = 0;          // 1-based
  const char* op = "";      // a string literal
  const char* what = "";    // a string literal
  int bucket = -1;
  int64_t bytes = 0;
  int64_t enqueued_ns = 0;  // steady clock
  int64_t started_ns = 0;   // 0: not yet
  int64_t ended_ns = 0;     // 0: not yet
  CollectiveState state = CollectiveState::kEnqueued;
};

class FlightRecorder {
 public:
  // Nanoseconds on a monotonic clock (default: std::chrono::steady_clock).
  using NowNs = std::function<int64_t()>;
  explicit FlightRecorder(size_t capacity = 256, NowNs now = nullptr);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // A collective issued to the backend; returns its sequence number (0
  // when the recorder is off). `op` and `what` must be string literals.
  int64_t Enqueue(const char* op, const char* what, int bucket, int64_t bytes);
  // The training thread begins to wait for `seq` / its wait returned / it
  // threw. Unknown or overwritten numbers (and 0) are ignored.
  void Started(int64_t seq);
  void Completed(int64_t seq);
  void Failed(int64_t seq);
  // Runs `wait` (which may throw) between Started(seq) and Completed(seq),
  // or Failed(seq) when it throws (the exception goes on).
  template <class Wait>
  void Around(int64_t seq, Wait&& wait) {
    Started(seq);
    try {
      wait();
    } catch (...) {
      Failed(seq);
      throw;
    }
    Completed(seq);
  }

  struct Snapshot {
    int64_t enqueued = 0;   // highest sequence number issued
    int64_t completed = 0;  // highest sequence number completed
    int64_t now_ns = 0;     // when it was taken (same clock as the records)
    std::vector<CollectiveRecord> recent;  // at most n, oldest first
  };
  // The newest `n` records (fewer when fewer were kept).
  Snapshot Take(size_t n) const;
  // One line per kept record, oldest first, times relative to now, e.g.
  // "#41 allreduce gradients bucket 0 1.2 MiB completed (enqueued 0.210 s
  // ago, took 0.004 s)".
  std::string Dump() const;
  size_t capacity() const { return ring_.size(); }

 private:
  CollectiveRecord* FindLocked(int64_t seq);

  NowNs now_;
  mutable std::mutex mu_;
  std::vector<CollectiveRecord> ring_;  // slot (seq - 1) % capacity
  int64_t next_seq_ = 1;                // guarded by mu_
  int64_t completed_ = 0;               // guarded by mu_
};

// "#41 allreduce gradients bucket 0 (1.2 MiB)".
std::string DescribeCollective(const CollectiveRecord& r);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_FLIGHT_RECORDER_H_
