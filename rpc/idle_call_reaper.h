// Cancels server streams that make no progress. A checkpoint stream in
// either direction holds a buffer, a file and, for an upload, a slot: a
// client that opens one and then stops sending (an upload) or stops
// reading (a download, whose write then never completes under HTTP/2 flow
// control) would hold them for ever. A reactor registers its call with
// Seen() when it opens and at each chunk moved; a call last seen `idle`
// ago is cancelled with TryCancel (its pending read or write then fails
// and the reactor finishes), checked every min(1 s, idle / 4). An idle
// time <= 0 cuts nothing (no thread).
//
// Contract: a reactor calls Gone() in OnDone, before it is deleted, and
// never Seen() after Gone(); the reaper cancels only calls it holds, under
// its mutex, so it never reaches a deleted call. gRPC runs a reactor's
// reactions on its executor, never inside TryCancel, so none waits for the
// mutex there. Every call must be Gone() before the reaper is destroyed
// (destroy it after the server shut down).
// Thread safety: every method from any thread.
#ifndef FRAMEWORM_RPC_IDLE_CALL_REAPER_H_
#define FRAMEWORM_RPC_IDLE_CALL_REAPER_H_

#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace frameworm {

class IdleCallReaper {
 public:
  explicit IdleCallReaper(absl::Duration idle);
  ~IdleCallReaper();  // stops the thread
  IdleCallReaper(const IdleCallReaper&) = delete;
  IdleCallReaper& operator=(const IdleCallReaper&) = delete;

  void Seen(grpc::CallbackServerContext* ctx);  // registers, or moves its clock on
  void Gone(grpc::CallbackServerContext* ctx);

 private:
  void Run();

  const absl::Duration idle_;
  absl::Mutex mu_;
  std::map<grpc::CallbackServerContext*, absl::Time> seen_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_IDLE_CALL_REAPER_H_
