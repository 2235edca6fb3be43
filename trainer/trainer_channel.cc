// Implementation of trainer/trainer_channel.h. This TU includes gRPC and the
// generated protobuf headers; it must never include LibTorch.
#include "trainer/trainer_channel.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/crc32.h"
#include "common/printable.h"
#include "common/received_file.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
#include "rpc/file_stream.h"
#include "rpc/rpc.h"
#include "rpc/status_util.h"

namespace frameworm {
namespace {

class GrpcTrainerChannel final : public ControlChannel {
 public:
  GrpcTrainerChannel(const TrainerChannelOptions& options,
                     std::function<std::shared_ptr<grpc::Channel>()> dial,
                     std::shared_ptr<grpc::Channel> channel)
      : options_(options),
        dial_(std::move(dial)),
        stub_(v1::TrainerService::NewStub(std::move(channel))) {}

  // The proto of one report (this channel's job, generation and token).
  void Fill(const StepReport& r, v1::StepMetrics* req) const {
    FillRef(req->mutable_ref());
    req->set_rank(r.rank);
    req->set_step(r.step);
    req->set_epoch(r.epoch);
    req->set_samples(r.samples);
    req->set_step_seconds(r.step_seconds);
    req->set_wait_seconds(r.wait_seconds);
    req->set_data_seconds(r.data_seconds);
    req->set_total_steps(r.total_steps);
    req->set_progress_only(r.progress_only);
    req->set_ping(r.ping);
    req->set_waiting_seconds(r.waiting_seconds);
    if (r.ping) req->set_measures_wait(true);
    if (r.collectives) {
      v1::CollectiveProgress* c = req->mutable_collectives();
      c->set_enqueued(r.collectives->enqueued);
      c->set_completed(r.collectives->completed);
      for (const StepReport::Collective& x : r.collectives->recent) {
        v1::CollectiveOp* o = c->add_recent();
        o->set_seq(x.seq);
        o->set_op(x.op);
        o->set_what(x.what);
        o->set_bucket(x.bucket);
        o->set_bytes(x.bytes);
        o->set_state(x.state);
        o->set_age_seconds(x.age_seconds);
        o->set_seconds(x.seconds);
      }
    }
    req->set_warning(PrintableLine(r.warning, 512));
    req->set_checkpoint_in_flight(std::clamp<int64_t>(r.checkpoint_in_flight, 0, r.step));
    // The coordinator refuses non-finite values (a diverged loss): they are
    // left out here, so the step still counts; the rank's log shows them.
    for (const auto& [k, v] : r.values) {
      if (std::isfinite(v)) (*req->mutable_values())[k] = v;
    }
  }

  absl::StatusOr<StepDirective> ReportStep(const StepReport& r) override {
    v1::StepMetrics req;
    Fill(r, &req);
    v1::ReportStepResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub_->ReportStep(&ctx, req, &resp);
    Note(s);
    if (!s.ok()) return FromGrpcStatus(s, "ReportStep");
    return Directive(resp);
  }

  absl::StatusOr<StepDirective> ReportSteps(const std::vector<StepReport>& batch) override {
    if (!batched_) return ControlChannel::ReportSteps(batch);
    v1::StepReports req;
    for (const StepReport& r : batch) Fill(r, req.add_reports());
    v1::ReportStepResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub_->ReportSteps(&ctx, req, &resp);
    Note(s);
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {  // an older coordinator
      batched_ = false;
      return ControlChannel::ReportSteps(batch);
    }
    if (!s.ok()) return FromGrpcStatus(s, "ReportSteps");
    return Directive(resp);
  }

  absl::StatusOr<std::vector<std::string>> ReportCheckpoint(
      const CheckpointReport& r) override {
    v1::CheckpointRecord req;
    FillRef(req.mutable_ref());
    req.set_step(r.step);
    req.set_path(r.path);
    req.set_bytes(r.bytes);
    req.set_checksum(r.checksum);
    req.set_memory(r.memory);
    v1::ReportCheckpointResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub_->ReportCheckpoint(&ctx, req, &resp);
    Note(s);
    if (!s.ok()) return FromGrpcStatus(s, "ReportCheckpoint");
    return std::vector<std::string>(resp.expired().begin(), resp.expired().end());
  }

  absl::StatusOr<bool> ReportBadCheckpoint(const std::string& path, const std::string& reason,
                                           bool coordinator_copy) override {
    v1::BadCheckpoint req;
    FillRef(req.mutable_ref());
    req.set_path(path);
    req.set_reason(PrintableLine(reason, 512));
    req.set_coordinator_copy(coordinator_copy);
    v1::BadCheckpointResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub_->ReportBadCheckpoint(&ctx, req, &resp);
    Note(s);
    if (!s.ok()) return FromGrpcStatus(s, "ReportBadCheckpoint");
    return resp.kept();
  }

  absl::Status UploadCheckpoint(int64_t step, const std::string& path) override {
    std::ifstream in(path, std::ios::binary);
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!in || ec) return absl::InternalError(absl::StrCat("cannot read checkpoint ", path));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.transfer_timeout));
    v1::UploadCheckpointResponse resp;
    auto writer = stub_->UploadCheckpoint(&ctx, &resp);
    v1::CheckpointChunk chunk;
    FillRef(chunk.mutable_ref());
    chunk.set_step(step);
    chunk.set_total_bytes(static_cast<int64_t>(size));
    uLong crc = crc32(0L, Z_NULL, 0);
    uint64_t left = size;
    bool sent_ok = true;
    do {
      std::string* data = chunk.mutable_data();
      data->resize(static_cast<size_t>(std::min<uint64_t>(left, kChunkBytes)));
      if (!data->empty() && !in.read(data->data(), static_cast<std::streamsize>(data->size()))) {
        writer->WritesDone();
        (void)writer->Finish();
        return absl::InternalError(absl::StrCat("reading checkpoint ", path, " failed"));
      }
      crc = Crc32(static_cast<uint32_t>(crc), data->data(), data->size());
      left -= data->size();
      if (left == 0) chunk.set_checksum(Crc32Text(static_cast<uint32_t>(crc)));
      sent_ok = writer->Write(chunk);
      ClearAllButData(chunk);
    } while (sent_ok && left > 0);
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    Note(s);
    if (!s.ok()) return FromGrpcStatus(s, "UploadCheckpoint");
    return absl::OkStatus();
  }

  absl::Status DownloadCheckpoint(const std::string& path, const std::string& dest) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.transfer_timeout));
    v1::DownloadCheckpointRequest req;
    FillRef(req.mutable_ref());
    req.set_path(path);
    auto reader = stub_->DownloadCheckpoint(&ctx, req);
    // The file is created once the first chunk names its size: the disk's
    // room is checked for it up front, and a byte past it is refused.
    std::unique_ptr<ReceivedFile> file;
    std::string want;  // the record's checksum (first chunk; empty from an older coordinator)
    absl::Status result = absl::OkStatus();
    v1::CheckpointChunk chunk;
    while (result.ok() && reader->Read(&chunk)) {
      if (!file) {
        want = chunk.checksum();
        absl::StatusOr<std::unique_ptr<ReceivedFile>> made =
            ReceivedFile::Create(dest, chunk.total_bytes(), /*keep_free=*/0);
        // A negative size is the copy's fault; a disk without room or a
        // file that cannot be created is this host's.
        if (!made.ok()) {
          result = made.status().code() == absl::StatusCode::kInvalidArgument
                       ? CopyIsBad(path, made.status())
                       : made.status();
          break;
        }
        file = *std::move(made);
      }
      absl::Status wrote = file->Append(chunk.data());
      if (!wrote.ok()) {
        result = wrote.code() == absl::StatusCode::kInvalidArgument ? CopyIsBad(path, wrote) : wrote;
        break;
      }
    }
    if (!result.ok()) ctx.TryCancel();  // stop the stream; its bytes are not wanted
    grpc::Status s = reader->Finish();
    if (!result.ok()) return result;
    if (!s.ok()) return FromGrpcStatus(s, "DownloadCheckpoint");
    if (!file) {
      return absl::DataLossError(absl::StrCat("the coordinator sent no chunk of ", path));
    }
    if (file->received() != file->expected()) {
      return absl::DataLossError(absl::StrCat("checkpoint download of ", path, " got ",
                                              file->received(), " of ", file->expected(),
                                              " bytes"));
    }
    const std::string got = Crc32Text(file->crc());
    if (!want.empty() && got != want) {
      return absl::DataLossError(absl::StrCat("the coordinator's copy of ", path, " is ", got,
                                              ", its record says ", want));
    }
    // Size and checksum hold, so what Commit refuses now is this host's
    // (a failed fsync or rename): INTERNAL.
    return file->Commit(got);
  }

 private:
  // After a call: a coordinator unreachable for over kRedialAfter (it
  // restarted; a channel's connection attempts can stay stuck on the old
  // one, e.g. a failed TLS handshake) gets a fresh channel, at most once
  // per kRedialAfter.
  void Note(const grpc::Status& s) {
    const absl::Time now = absl::Now();
    // grpc::StatusCode and absl::StatusCode share their values.
    if (s.ok() || !CoordinatorAway(static_cast<absl::StatusCode>(s.error_code()))) {
      last_ok_ = now;
      return;
    }
    if (now - last_ok_ < kRedialAfter || now - last_dial_ < kRedialAfter) return;
    last_dial_ = now;
    stub_ = v1::TrainerService::NewStub(dial_());
  }
  static constexpr absl::Duration kRedialAfter = absl::Seconds(2);

  // What the coordinator sent breaks its own announcement (a negative size,
  // more bytes than declared, a chunk over the limit): its copy is not the
  // record's.
  static absl::Status CopyIsBad(const std::string& path, const absl::Status& why) {
    return absl::DataLossError(
        absl::StrCat("the coordinator's copy of ", path, " is not what it announced: ", why.message()));
  }

  static StepDirective Directive(const v1::ReportStepResponse& resp) {
    StepDirective d;
    d.checkpoint_at_step = resp.checkpoint_at_step();
    d.stop = resp.stop();
    return d;
  }

  void FillRef(v1::JobRef* ref) const {
    ref->set_job_id(options_.job_id);
    ref->set_generation(options_.generation);
    ref->set_token(options_.token);
  }
  void SetDeadline(grpc::ClientContext* ctx) const {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  }

  static constexpr uint64_t kChunkBytes = 1 << 20;  // the coordinator's limit
  const TrainerChannelOptions options_;
  const std::function<std::shared_ptr<grpc::Channel>()> dial_;
  std::unique_ptr<v1::TrainerService::Stub> stub_;
  bool batched_ = true;  // false once the coordinator said UNIMPLEMENTED
  absl::Time last_ok_ = absl::Now();
  absl::Time last_dial_ = absl::InfinitePast();
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
  std::optional<TlsFiles> tls;
  if (!options.tls_dir.empty()) {
    absl::StatusOr<TlsFiles> loaded = LoadTrainerTlsDir(options.tls_dir);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("FRAMEWORM_TLS_DIR: ", loaded.status().message()));
    }
    tls = *std::move(loaded);
  }
  auto dial = [coordinator = options.coordinator, tls] {
    return MakeChannel(coordinator, tls ? &*tls : nullptr);
  };
  std::shared_ptr<grpc::Channel> channel = dial();
  if (options.connect_timeout > absl::ZeroDuration() &&
      !channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the coordinator at ", options.coordinator,
        " (FRAMEWORM_COORDINATOR) within ", absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<ControlChannel>(
      new GrpcTrainerChannel(options, std::move(dial), std::move(channel)));
}

}  // namespace frameworm
