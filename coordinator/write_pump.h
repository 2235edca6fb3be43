// WritePump<Reactor, Msg>: the write side of a gRPC callback-API server
// stream, written once for every stream the coordinator serves (worker
// sessions, WatchJob, GetLogs). `Reactor` is the grpc reactor it extends
// (grpc::ServerWriteReactor<Msg>, grpc::ServerBidiReactor<In, Msg>, or any
// class with StartWrite(const Msg*), Finish(grpc::Status) and virtual
// OnWriteDone(bool) / OnCancel()); the concrete reactor derives from the
// pump and says what to write next (NextLocked).
//
// Contract:
//  - At most one write is in flight. Poke() (from any thread: the
//    transport's notifications) starts the next write when none is; after
//    every completed write the pump asks for the next message itself, so a
//    poke that arrives during a write is never lost.
//  - NextLocked(out) answers Write() (after filling *out), Idle() (nothing
//    to send now: wait for the next poke) or Finish(status) (end the
//    stream).
//  - A failed write ends the stream with OK (the peer is gone).
//  - RequestFinish(status) ends the stream now, or right after the write in
//    flight and every hold (the first request wins); OnCancel() requests
//    CANCELLED.
//  - Hold() / Release(): an operation of the concrete reactor outside gRPC
//    (e.g. a timer that will start the next read) that Finish must wait
//    for, because OnDone (and the reactor's deletion) follows Finish.
//    FinishRequested() says whether the holder should skip its work.
//  - Finish is called exactly once; nothing is written after it.
//  - Nothing blocks: every step runs on the calling thread holding only the
//    pump's mutex (NextLocked may call the Coordinator, which never calls
//    back into a stream under its own lock).
//
// Ownership: the reactor owns itself (gRPC's callback API); it must stop
// being pokeable (unregister) in OnDone before deleting itself.
// Thread safety: one absl::Mutex (mu_) guards the pump's state and every
// member the concrete reactor declares ABSL_GUARDED_BY(mu_); NextLocked runs
// with mu_ held and must not call Poke or RequestFinish.
#ifndef FRAMEWORM_COORDINATOR_WRITE_PUMP_H_
#define FRAMEWORM_COORDINATOR_WRITE_PUMP_H_

#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/status.h"

namespace frameworm::coordinator {

// Something a notification can wake: a stream that writes.
class Pokeable {
 public:
  virtual ~Pokeable() = default;
  virtual void Poke() = 0;
};

template <typename Reactor, typename Msg>
class WritePump : public Reactor, public Pokeable {
 public:
  void Poke() override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    PumpLocked();
  }

  void RequestFinish(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (writing_ || holds_ > 0) {
      if (!pending_finish_) pending_finish_ = std::move(status);
      return;
    }
    FinishLocked(std::move(status));
  }

  void Hold() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    ++holds_;
  }
  void Release() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    --holds_;
    if (holds_ == 0 && !writing_ && pending_finish_) FinishLocked(*std::move(pending_finish_));
  }
  bool FinishRequested() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return finished_ || pending_finish_.has_value();
  }
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    writing_ = false;
    if (!ok) pending_finish_ = grpc::Status::OK;  // the peer is gone
    if (pending_finish_) {
      if (holds_ == 0) FinishLocked(*std::move(pending_finish_));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override { RequestFinish(grpc::Status::CANCELLED); }

 protected:
  // NextLocked's answer. (Finish here hides Reactor::Finish on purpose: a
  // pumped stream ends only through the pump.)
  struct Next {
    enum Kind { kIdle, kWrite, kFinish } kind = kIdle;
    grpc::Status status;  // kFinish
  };
  static Next Idle() { return Next{Next::kIdle, grpc::Status::OK}; }
  static Next Write() { return Next{Next::kWrite, grpc::Status::OK}; }
  static Next Finish(grpc::Status s) {
    return Next{Next::kFinish, std::move(s)};
  }

  // The next message to write, into *out (which the pump keeps alive until
  // the write completes).
  virtual Next NextLocked(Msg* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  absl::Mutex mu_;

 private:
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || pending_finish_) return;
    Next next = NextLocked(&out_);
    switch (next.kind) {
      case Next::kIdle:
        return;
      case Next::kFinish:
        FinishLocked(std::move(next.status));
        return;
      case Next::kWrite:
        writing_ = true;
        this->StartWrite(&out_);
        return;
    }
  }
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    this->Reactor::Finish(std::move(status));
  }

  Msg out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int holds_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_WRITE_PUMP_H_
