// A small real TrainerService for tests (callback API), recording what it
// receives. Test-only; not part of any library.
#ifndef FRAMEWORM_RPC_TEST_TRAINER_SERVICE_H_
#define FRAMEWORM_RPC_TEST_TRAINER_SERVICE_H_

#include <string>
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
  // Each report as ReportStep would (a held rank is refused here), in
  // order; the reply is the last one's. UNIMPLEMENTED while batches are
  // turned off (an older coordinator).
  grpc::ServerUnaryReactor* ReportSteps(grpc::CallbackServerContext* ctx,
                                        const v1::StepReports* req,
                                        v1::ReportStepResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::MutexLock l(&mu_);
    if (!batches_) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no ReportSteps here"));
      return reactor;
    }
    if (fail_batches_ > 0) {  // FailNextBatches: nothing recorded
      --fail_batches_;
      failed_batches_.push_back(req->reports_size());
      reactor->Finish(grpc::Status(fail_code_, "refused by FailNextBatches"));
      return reactor;
    }
    batch_sizes_.push_back(req->reports_size());
    for (const v1::StepMetrics& m : req->reports()) {
      steps_.push_back(m);
      if (m.ref().job_id() == "stale") {
        reactor->Finish(grpc::Status(grpc::StatusCode::ABORTED, "generation 1 is not current (2)"));
        return reactor;
      }
      resp->set_checkpoint_at_step(m.step() + 10);
      resp->set_stop(m.step() >= 100);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  void set_batches(bool on) {
    absl::MutexLock l(&mu_);
    batches_ = on;
  }
  // The next n ReportSteps calls end with `code` and record nothing (a
  // coordinator away, or refusing); failed_batches() lists their sizes.
  void FailNextBatches(int n, grpc::StatusCode code) {
    absl::MutexLock l(&mu_);
    fail_batches_ = n;
    fail_code_ = code;
  }
  std::vector<int> failed_batches() {
    absl::MutexLock l(&mu_);
    return failed_batches_;
  }
  std::vector<int> batch_sizes() {
    absl::MutexLock l(&mu_);
    return batch_sizes_;
  }
  grpc::ServerUnaryReactor* ReportCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::CheckpointRecord* req,
      v1::ReportCheckpointResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::MutexLock l(&mu_);
    ++checkpoint_calls_;
    if (fail_checkpoints_ > 0) {  // FailNextCheckpointReports: nothing recorded
      --fail_checkpoints_;
      reactor->Finish(grpc::Status(fail_checkpoint_code_, "refused by FailNextCheckpointReports"));
      return reactor;
    }
    checkpoints_.push_back(*req);
    for (const std::string& e : expired_) resp->add_expired(e);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // The next n ReportCheckpoint calls end with `code` and record nothing.
  void FailNextCheckpointReports(int n, grpc::StatusCode code) {
    absl::MutexLock l(&mu_);
    fail_checkpoints_ = n;
    fail_checkpoint_code_ = code;
  }
  // What a recorded ReportCheckpoint answers as expired ({"/old/ckpt"}
  // until set).
  void set_expired(std::vector<std::string> paths) {
    absl::MutexLock l(&mu_);
    expired_ = std::move(paths);
  }
  // ReportCheckpoint calls, recorded or failed.
  int checkpoint_calls() {
    absl::MutexLock l(&mu_);
    return checkpoint_calls_;
  }
  void ReleaseHeld() {
    absl::MutexLock l(&mu_);
    for (auto* r : held_) r->Finish(grpc::Status::OK);
    held_.clear();
    hold_uploads_ = false;
    for (auto* r : held_uploads_) r->Finish(grpc::Status::OK);
    held_uploads_.clear();
  }
  // Reads every chunk; once the stream ends records its step (uploads())
  // and answers its byte count, or, while HoldUploads(true), keeps the
  // call open until HoldUploads(false).
  grpc::ServerReadReactor<v1::CheckpointChunk>* UploadCheckpoint(
      grpc::CallbackServerContext*, v1::UploadCheckpointResponse* resp) override {
    class Reader final : public grpc::ServerReadReactor<v1::CheckpointChunk> {
     public:
      Reader(RecordingTrainerService* s, v1::UploadCheckpointResponse* resp) : s_(s), resp_(resp) {
        StartRead(&chunk_);
      }
      void OnReadDone(bool ok) override {
        if (ok) {
          if (step_ < 0) step_ = chunk_.step();
          bytes_ += static_cast<int64_t>(chunk_.data().size());
          StartRead(&chunk_);
          return;
        }
        resp_->set_bytes(bytes_);
        s_->Uploaded(this, step_);
      }
      void OnDone() override { delete this; }

     private:
      RecordingTrainerService* s_;
      v1::UploadCheckpointResponse* resp_;
      v1::CheckpointChunk chunk_;
      int64_t step_ = -1;
      int64_t bytes_ = 0;
    };
    return new Reader(this, resp);
  }
  void HoldUploads(bool on) {
    absl::MutexLock l(&mu_);
    hold_uploads_ = on;
    if (on) return;
    for (auto* r : held_uploads_) r->Finish(grpc::Status::OK);
    held_uploads_.clear();
  }
  // Every upload from now on ends with `code` (OK: accepted again).
  void RefuseUploads(grpc::StatusCode code) {
    absl::MutexLock l(&mu_);
    upload_refusal_ = code;
  }
  // The steps of the uploads received whole, in order (held ones too).
  std::vector<int64_t> uploads() {
    absl::MutexLock l(&mu_);
    return uploads_;
  }
  std::vector<v1::StepMetrics> steps() {
    absl::MutexLock l(&mu_);
    return steps_;
  }
  std::vector<v1::CheckpointRecord> checkpoints() {
    absl::MutexLock l(&mu_);
    return checkpoints_;
  }
  // DownloadCheckpoint serves `bytes` in chunks of up to 1 MiB, the first
  // naming the size (`announced`, or the true size when -1) and `checksum`
  // (empty: none, as an older coordinator).
  void ServeDownload(std::string bytes, std::string checksum, int64_t announced = -1) {
    absl::MutexLock l(&mu_);
    download_ = std::move(bytes);
    download_checksum_ = std::move(checksum);
    download_announced_ = announced;
  }
  // The chunks DownloadCheckpoint has written so far (a client that stops
  // reading stops them).
  int download_chunks_sent() {
    absl::MutexLock l(&mu_);
    return download_chunks_sent_;
  }
  grpc::ServerWriteReactor<v1::CheckpointChunk>* DownloadCheckpoint(
      grpc::CallbackServerContext*, const v1::DownloadCheckpointRequest*) override {
    class Writer final : public grpc::ServerWriteReactor<v1::CheckpointChunk> {
     public:
      Writer(RecordingTrainerService* owner, const std::string& bytes, const std::string& checksum,
             int64_t announced)
          : owner_(owner) {
        for (size_t at = 0; at == 0 || at < bytes.size(); at += 1 << 20) {
          v1::CheckpointChunk& c = chunks_.emplace_back();
          c.set_data(bytes.substr(at, 1 << 20));
        }
        chunks_[0].set_total_bytes(announced != -1 ? announced : static_cast<int64_t>(bytes.size()));
        chunks_[0].set_checksum(checksum);
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::CANCELLED);
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (i_ == chunks_.size()) return Finish(grpc::Status::OK);
        {
          absl::MutexLock l(&owner_->mu_);
          ++owner_->download_chunks_sent_;
        }
        StartWrite(&chunks_[i_++]);
      }
      RecordingTrainerService* const owner_;
      std::vector<v1::CheckpointChunk> chunks_;
      size_t i_ = 0;
    };
    std::string bytes, checksum;
    int64_t announced;
    {
      absl::MutexLock l(&mu_);
      download_chunks_sent_ = 0;
      bytes = download_;
      checksum = download_checksum_;
      announced = download_announced_;
    }
    return new Writer(this, bytes, checksum, announced);
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::StepMetrics> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CheckpointRecord> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
  bool batches_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<int> batch_sizes_ ABSL_GUARDED_BY(mu_);
  int fail_batches_ ABSL_GUARDED_BY(mu_) = 0;
  void Uploaded(grpc::ServerReadReactor<v1::CheckpointChunk>* r, int64_t step) {
    absl::MutexLock l(&mu_);
    if (upload_refusal_ != grpc::StatusCode::OK) {
      r->Finish(grpc::Status(upload_refusal_, "refused by RefuseUploads"));
      return;
    }
    uploads_.push_back(step);
    if (hold_uploads_) {
      held_uploads_.push_back(r);
    } else {
      r->Finish(grpc::Status::OK);
    }
  }
  bool hold_uploads_ ABSL_GUARDED_BY(mu_) = false;
  grpc::StatusCode upload_refusal_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  std::vector<grpc::ServerReadReactor<v1::CheckpointChunk>*> held_uploads_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> uploads_ ABSL_GUARDED_BY(mu_);
  int fail_checkpoints_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::StatusCode fail_checkpoint_code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::UNAVAILABLE;
  int checkpoint_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> expired_ ABSL_GUARDED_BY(mu_) = {"/old/ckpt"};
  grpc::StatusCode fail_code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::UNAVAILABLE;
  std::vector<int> failed_batches_ ABSL_GUARDED_BY(mu_);
  std::string download_ ABSL_GUARDED_BY(mu_), download_checksum_ ABSL_GUARDED_BY(mu_);
  int64_t download_announced_ ABSL_GUARDED_BY(mu_) = -1;
  int download_chunks_sent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace frameworm::testing

#endif  // FRAMEWORM_RPC_TEST_TRAINER_SERVICE_H_
