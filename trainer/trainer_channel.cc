// Implementation of trainer/trainer_channel.h. This TU includes gRPC and the
// generated protobuf headers; it must never include LibTorch.
#include "trainer/trainer_channel.h"

#include "absl/strings/str_cat.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
#include "rpc/rpc.h"
#include "rpc/status_util.h"

namespace frameworm {
namespace {

class GrpcTrainerChannel final : public ControlChannel {
 public:
  GrpcTrainerChannel(const TrainerChannelOptions& options,
                     std::shared_ptr<grpc::Channel> channel)
      : options_(options),
        stub_(v1::TrainerService::NewStub(std::move(channel))) {}

  absl::StatusOr<StepDirective> ReportStep(const StepReport& r) override {
    v1::StepMetrics req;
    FillRef(req.mutable_ref());
    req.set_rank(r.rank);
    req.set_step(r.step);
    req.set_epoch(r.epoch);
    req.set_samples(r.samples);
    req.set_step_seconds(r.step_seconds);
    req.set_total_steps(r.total_steps);
    req.set_progress_only(r.progress_only);
    for (const auto& [k, v] : r.values) (*req.mutable_values())[k] = v;
    v1::ReportStepResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub_->ReportStep(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s, "ReportStep");
    StepDirective d;
    d.checkpoint_at_step = resp.checkpoint_at_step();
    d.stop = resp.stop();
    return d;
  }

  absl::Status ReportCheckpoint(const CheckpointReport& r) override {
    v1::CheckpointRecord req;
    FillRef(req.mutable_ref());
    req.set_step(r.step);
    req.set_path(r.path);
    req.set_bytes(r.bytes);
    req.set_checksum(r.checksum);
    v1::ReportCheckpointResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub_->ReportCheckpoint(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s, "ReportCheckpoint");
    return absl::OkStatus();
  }

 private:
  void FillRef(v1::JobRef* ref) const {
    ref->set_job_id(options_.job_id);
    ref->set_generation(options_.generation);
  }
  void SetDeadline(grpc::ClientContext* ctx) const {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  }

  const TrainerChannelOptions options_;
  std::unique_ptr<v1::TrainerService::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ControlChannel>> NewTrainerChannel(
    const TrainerChannelOptions& options) {
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "trainer channel: empty coordinator address (FRAMEWORM_COORDINATOR)");
  }
  if (options.job_id.empty()) {
    return absl::InvalidArgumentError(
        "trainer channel: empty job id (FRAMEWORM_JOB_ID)");
  }
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "trainer channel: call_timeout must be positive");
  }
  return std::unique_ptr<ControlChannel>(
      new GrpcTrainerChannel(options, MakeChannel(options.coordinator)));
}

}  // namespace frameworm
