// Fetches of checkpoint copies (HoldCheckpoint with sources) off the
// agent's loop: one thread runs `fetch` for each queued hold, in order, one
// at a time, and calls `on_done` after each; the agent takes the results
// with TakeDone. Pending(path) says whether a hold of that path is queued or
// running (a rank resuming from it waits). A hold of a path already queued
// or running is fetched too, in its turn: one sent again finds the copy in
// place (or tries again after a failed fetch), one of another checksum
// replaces it. A hold equal to one still queued (job, step, path, size,
// checksum) is merged into it: the queued one takes its secret and sources
// (the newer ask is answered), so asks repeated while a fetch hangs add no
// attempts. A queued hold of an older step of the same job in the same
// directory is superseded by a newer one (unless a rank waits to resume
// from it, `waited_on`; steps are compared, not generations: a program
// that counts its steps from 0 again in a later generation may see a
// replica of its older, higher step fetched first): it is never fetched
// and is done with ABORTED (its answer says so), so a replica that lags behind the
// checkpoints (a slow link, memory checkpoints every few seconds) fetches
// the newest next, not every one in turn; the one running goes on. At most
// kMaxQueued holds wait: Enqueue refuses more with RESOURCE_EXHAUSTED.
//
// Shutdown: the destructor sets the stop flag `fetch` is given, drops what
// is queued and joins the thread (a running fetch ends at its next chunk,
// or at its deadline).
// Thread safety: every member is thread-safe, Enqueue as far as its
// `waited_on` is (the agent's reads its loop's state: Enqueue is called
// from the loop only).
#ifndef FRAMEWORM_WORKER_CHECKPOINT_FETCHER_H_
#define FRAMEWORM_WORKER_CHECKPOINT_FETCHER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/checkpoint_holdings.h"

namespace frameworm {

class CheckpointFetcher {
 public:
  // Fetches `h` into place; sets h.copied when it wrote the file.
  using Fetch = std::function<absl::Status(HeldCheckpoint& h, const std::atomic<bool>& stop)>;
  // `waited_on(path)`: a rank waits to resume from `path` (called by
  // Enqueue, on its caller's thread, under the fetcher's lock): a queued
  // hold of that path is never superseded.
  CheckpointFetcher(Fetch fetch, std::function<void()> on_done,
                    std::function<bool(const std::string&)> waited_on = nullptr);
  ~CheckpointFetcher();

  static constexpr size_t kMaxQueued = 1024;
  absl::Status Enqueue(HeldCheckpoint h);
  // (Never of an empty path.)
  bool Pending(const std::string& path) const;
  // Whether a hold of a path directly in `dir` is queued or running.
  bool PendingUnder(const std::string& dir) const;
  std::vector<std::pair<HeldCheckpoint, absl::Status>> TakeDone();

 private:
  void Loop();
  // Whether `match` is true of the running hold's path or a queued one's.
  bool PendingWhere(const std::function<bool(const std::string&)>& match) const;
  absl::Status EnqueueOrSupersede(HeldCheckpoint h, bool* superseded);
  const Fetch fetch_;
  const std::function<void()> on_done_;
  const std::function<bool(const std::string&)> waited_on_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  std::deque<HeldCheckpoint> queue_ ABSL_GUARDED_BY(mu_);
  std::string running_ ABSL_GUARDED_BY(mu_);  // the path being fetched
  std::vector<std::pair<HeldCheckpoint, absl::Status>> done_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_CHECKPOINT_FETCHER_H_
