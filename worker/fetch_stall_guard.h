// Ends a client call that makes no progress. A checkpoint fetch reads
// chunks with gRPC's blocking reader: a source that accepts the call and
// then sends nothing would hold the fetch (and the one fetcher thread, and
// a worker's shutdown) until the call's deadline, minutes away. The guard
// cancels the call once no chunk came for `stall`, or as soon as `stop`
// (the worker shuts down) or `abort` (another stream of the same fetch
// failed) is set; the blocked Read then returns false.
//
// Thread safety: Progress() and the accessors from the reading thread; the
// guard's own thread only cancels the context, which gRPC allows from any
// thread. The context must outlive the guard (declare the guard after it).
#ifndef FRAMEWORM_WORKER_FETCH_STALL_GUARD_H_
#define FRAMEWORM_WORKER_FETCH_STALL_GUARD_H_

#include <atomic>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"

namespace frameworm {

// How long a checkpoint fetch may go without a chunk (a 1 MiB chunk at
// 35 KB/s still arrives in time).
inline constexpr absl::Duration kFetchStall = absl::Seconds(30);

class StallGuard {
 public:
  StallGuard(grpc::ClientContext* ctx, absl::Duration stall, const std::atomic<bool>& stop,
             const std::atomic<bool>* abort = nullptr);
  ~StallGuard();  // stops watching (joins its thread)
  StallGuard(const StallGuard&) = delete;
  StallGuard& operator=(const StallGuard&) = delete;

  void Progress();  // a chunk came
  // Why the call was ended early, checked once the reader stops: OK when
  // nothing asked for it; DEADLINE_EXCEEDED (no chunk for `stall`: the
  // source stalled), CANCELLED (`stop`: the worker is shutting down) or
  // ABORTED (`abort`: another stream of this fetch failed).
  absl::Status Ended() const;

 private:
  void Watch();

  grpc::ClientContext* const ctx_;
  const absl::Duration stall_;
  const std::atomic<bool>& stop_;
  const std::atomic<bool>* const abort_;
  mutable absl::Mutex mu_;
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_FETCH_STALL_GUARD_H_
