// A small real TrainerService for tests (callback API), recording what it
// receives. Test-only; not part of any library.
#ifndef FRAMEWORM_RPC_TEST_TRAINER_SERVICE_H_
#define FRAMEWORM_RPC_TEST_TRAINER_SERVICE_H_

#include <vector>

#include "absl/synchronization/mutex.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"

namespace frameworm::testing {

class RecordingTrainerService final
    : public v1::TrainerService::CallbackService {
 public:
  // rank == 99: the call is held open until ReleaseHeld() (deadline tests).
  // job_id == "stale": ABORTED.
  grpc::ServerUnaryReactor* ReportStep(grpc::CallbackServerContext* ctx,
                                       const v1::StepMetrics* req,
                                       v1::ReportStepResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::MutexLock l(&mu_);
    steps_.push_back(*req);
    if (req->ref().job_id() == "stale") {
      reactor->Finish(grpc::Status(grpc::StatusCode::ABORTED,
                                   "generation 1 is not current (2)"));
    } else if (req->rank() == 99) {
      held_.push_back(reactor);
    } else {
      resp->set_checkpoint_at_step(req->step() + 10);
      resp->set_stop(req->step() >= 100);
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* ReportCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::CheckpointRecord* req,
      v1::ReportCheckpointResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::MutexLock l(&mu_);
    checkpoints_.push_back(*req);
    resp->add_expired("/old/ckpt");
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  void ReleaseHeld() {
    absl::MutexLock l(&mu_);
    for (auto* r : held_) r->Finish(grpc::Status::OK);
    held_.clear();
  }
  std::vector<v1::StepMetrics> steps() {
    absl::MutexLock l(&mu_);
    return steps_;
  }
  std::vector<v1::CheckpointRecord> checkpoints() {
    absl::MutexLock l(&mu_);
    return checkpoints_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::StepMetrics> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CheckpointRecord> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frameworm::testing

#endif  // FRAMEWORM_RPC_TEST_TRAINER_SERVICE_H_
