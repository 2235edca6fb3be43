#include "coordinator/service.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/line_budget.h"
#include "common/printable.h"
#include "coordinator/heartbeat_pacer.h"
#include "coordinator/job.h"
#include "coordinator/write_pump.h"
#include "jobspec/job_spec.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
#include "frameworm/v1/worker_service.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "coordinator/access.h"
#include "coordinator/collective_report.h"
#include "coordinator/paging.h"
#include "rpc/file_stream.h"
#include "rpc/idle_call_reaper.h"
#include "rpc/status_util.h"
#include "rpc/tls.h"

namespace frameworm::coordinator {
namespace {

constexpr size_t kLogChunkBytes = 64 << 10;
// How many task statuses and holds one worker session may send a second,
// and as many at once (HeartbeatPacer's bucket; a worker sends a few).
constexpr int kWorkerMessagesPerSecond = 1000;
// A session's log chunks: kLogUnitsPerSecond units a second and as many at
// once, a chunk costing one unit per 64 KiB begun: 256 MiB/s of full
// chunks (a worker's shutdown drains 2 streams x 64 MiB per task), 4,096
// tiny ones a second.
constexpr int kLogUnitsPerSecond = 4096;
constexpr size_t kLogUnitBytes = 64 << 10;

}  // namespace

// Shared state of the three services; reactors hold a pointer to it.
struct CoordinatorService::Impl {
  Impl(Coordinator* c, absl::Duration idle) : core(c), idle_calls(idle) {}
  Coordinator* const core;
  // Checkpoint streams (uploads, DownloadCheckpoint, GetCheckpoint) that
  // move no chunk for the service's stream idle time are cancelled.
  IdleCallReaper idle_calls;

  absl::Mutex mu;
  std::map<std::string, Pokeable*> sessions ABSL_GUARDED_BY(mu);
  std::multimap<std::string, Pokeable*> job_watchers ABSL_GUARDED_BY(mu);

  // Checkpoint uploads in flight: at most kMaxUploadsPerJob for one job and
  // kMaxUploads in all (each holds a stream, a thread's worth of state and a
  // partial file; a job's rank 0 sends one at a time).
  static constexpr int kMaxUploadsPerJob = 2;
  static constexpr int kMaxUploads = 64;
  std::map<std::string, int> uploads ABSL_GUARDED_BY(mu);
  int uploads_total ABSL_GUARDED_BY(mu) = 0;
  absl::Status AcquireUpload(const std::string& job) {
    absl::MutexLock l(&mu);
    if (uploads_total >= kMaxUploads) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the coordinator is receiving ", uploads_total, " checkpoint uploads; retry later"));
    }
    int& n = uploads[job];
    if (n >= kMaxUploadsPerJob) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "job ", PrintableLine(job, 64), " has ", n, " checkpoint uploads in flight already"));
    }
    ++n;
    ++uploads_total;
    return absl::OkStatus();
  }
  void ReleaseUpload(const std::string& job) {
    absl::MutexLock l(&mu);
    if (auto it = uploads.find(job); it != uploads.end() && --it->second <= 0) uploads.erase(it);
    --uploads_total;
  }
  void AddSession(const std::string& id, Pokeable* p) {
    absl::MutexLock l(&mu);
    sessions[id] = p;
  }
  void RemoveSession(const std::string& id, Pokeable* p) {
    absl::MutexLock l(&mu);
    auto it = sessions.find(id);
    if (it != sessions.end() && it->second == p) sessions.erase(it);
  }
  // Streams that follow a job (WatchJob, GetLogs): at most
  // kMaxWatchersPerJob for one job, kMaxWatchersPerCaller for one caller
  // (Caller::Owner: a user, an admin, or every plaintext caller together)
  // and kMaxWatchers in all (every change of the job pokes each of its
  // watchers under `mu`, which worker sessions need too; one user cannot
  // take every place). A stream reserves its place before its reactor
  // exists (ReserveWatcher), registers in its constructor (AddWatcher) and
  // gives both back in OnDone (RemoveWatcher).
  static constexpr int kMaxWatchersPerJob = 64;
  static constexpr int kMaxWatchersPerCaller = 256;
  static constexpr int kMaxWatchers = 4096;
  std::map<std::string, int> watchers_of ABSL_GUARDED_BY(mu);  // reserved, per job
  std::map<std::string, int> watchers_by ABSL_GUARDED_BY(mu);  // reserved, per caller
  int watchers_total ABSL_GUARDED_BY(mu) = 0;
  absl::Status ReserveWatcher(const std::string& job, const std::string& caller) {
    absl::MutexLock l(&mu);
    if (watchers_total >= kMaxWatchers) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the coordinator serves ", watchers_total, " job streams (watch, logs) already; retry later"));
    }
    if (auto by = watchers_by.find(caller); by != watchers_by.end() && by->second >= kMaxWatchersPerCaller) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this caller has ", by->second, " job streams (watch, logs) open already; close some and retry"));
    }
    int& n = watchers_of[job];
    if (n >= kMaxWatchersPerJob) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "job ", PrintableLine(job, 64), " has ", n,
          " streams (watch, logs) open already; close some and retry"));
    }
    ++n;
    ++watchers_by[caller];
    ++watchers_total;
    return absl::OkStatus();
  }
  void AddWatcher(const std::string& job, Pokeable* p) {
    absl::MutexLock l(&mu);
    job_watchers.emplace(job, p);
  }
  void RemoveWatcher(const std::string& job, const std::string& caller, Pokeable* p) {
    absl::MutexLock l(&mu);
    if (auto n = watchers_of.find(job); n != watchers_of.end()) {
      if (--n->second <= 0) watchers_of.erase(n);
      --watchers_total;
    }
    if (auto by = watchers_by.find(caller); by != watchers_by.end() && --by->second <= 0) {
      watchers_by.erase(by);
    }
    auto [b, e] = job_watchers.equal_range(job);
    for (auto it = b; it != e; ++it)
      if (it->second == p) {
        job_watchers.erase(it);
        return;
      }
  }
  // Pokes under `mu`, so a reactor cannot be deleted meanwhile (reactors
  // unregister in OnDone before deleting themselves).
  void PokeSession(const std::string& id) {
    absl::MutexLock l(&mu);
    auto it = sessions.find(id);
    if (it != sessions.end()) it->second->Poke();
  }
  void PokeJob(const std::string& job) {
    absl::MutexLock l(&mu);
    auto [b, e] = job_watchers.equal_range(job);
    for (auto it = b; it != e; ++it) it->second->Poke();
  }
};

namespace {

using Impl = CoordinatorService::Impl;

// ------------------------------------------------------- worker session

// Reads the worker's messages; writes the commands the core queues for its
// session, in order.
class SessionReactor final
    : public WritePump<
          grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>,
          v1::CoordinatorMessage> {
 public:
  explicit SessionReactor(Impl* impl) : impl_(impl) { StartRead(&in_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the worker closed its side or the stream broke
      RequestFinish(grpc::Status::OK);
      return;
    }
    const std::string session = Session();
    const bool first = session.empty();
    if (first) {
      absl::Status s = impl_->core->AttachSession(in_.session_id());
      if (!s.ok()) {
        RequestFinish(ToGrpcStatus(s));
        return;
      }
      {
        absl::MutexLock l(&mu_);
        session_ = in_.session_id();
      }
      impl_->AddSession(in_.session_id(), this);
    } else if (in_.session_id() != session) {
      RequestFinish(grpc::Status(
          grpc::FAILED_PRECONDITION,
          absl::StrCat("message for session '", PrintableLine(in_.session_id(), 64),
                       "' on the stream of session '", session, "'")));
      return;
    }
    absl::Status s = impl_->core->HandleWorkerMessage(in_);
    if (absl::IsNotFound(s)) {  // the session was replaced by a new one
      RequestFinish(ToGrpcStatus(s));
      return;
    }
    if (int64_t suppressed = 0; !s.ok() && log_budget_.Take(absl::Now(), &suppressed)) {
      std::fprintf(stderr, "coordinator: worker message: %s%s\n",
                   PrintableLine(s.ToString(), 512).c_str(),
                   suppressed > 0
                       ? absl::StrCat(" (", suppressed, " more on this session not logged)").c_str()
                       : "");
    }
    if (in_.has_log()) impl_->PokeJob(in_.log().ref().job_id());
    // Commands queued later reach this reactor through SessionHasCommands;
    // only those queued before it registered (first message) need a pump
    // here. A heartbeat never queues one (HandleWorkerMessage's fast path),
    // a task status may (the listener also pokes, this is cheap insurance).
    if (first || !in_.has_heartbeat()) Poke();
    // A message without a kind counts as a heartbeat (HandleWorkerMessage)
    // and is paced as one; log chunks, and task statuses and holds, have
    // budgets of their own, far above what a worker sends.
    absl::Duration wait;
    if (in_.has_log()) {
      const size_t units = std::max<size_t>(
          1, (in_.log().data().size() + kLogUnitBytes - 1) / kLogUnitBytes);
      wait = log_pacer_.Admit(absl::Now(), static_cast<double>(units));
    } else if (in_.has_task_status() || in_.has_held()) {
      wait = other_pacer_.Admit(absl::Now());
    } else {
      wait = pacer_.Admit(absl::Now());
    }
    if (wait > absl::ZeroDuration()) {
      // A flood: stop reading this stream for a while (the hold keeps
      // Finish, hence OnDone, from running meanwhile).
      Hold();
      alarm_.Set(absl::ToChronoTime(absl::Now() + wait), [this](bool fired) {
        if (fired && !FinishRequested()) StartRead(&in_);
        Release();
      });
      return;
    }
    StartRead(&in_);
  }

  void OnDone() override {
    const std::string session = Session();
    if (!session.empty()) {
      impl_->RemoveSession(session, this);
      impl_->core->DetachSession(session);
    }
    delete this;
  }

 private:
  std::string Session() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return session_;
  }
  Next NextLocked(v1::CoordinatorMessage* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (session_.empty()) return Idle();
    if (queue_.empty()) {
      auto cmds = impl_->core->TakeCommands(session_);
      if (!cmds.ok()) return Finish(ToGrpcStatus(cmds.status()));
      for (auto& c : *cmds) queue_.push_back(std::move(c));
    }
    if (queue_.empty()) return Idle();
    *out = std::move(queue_.front());
    queue_.pop_front();
    return Write();
  }

  Impl* const impl_;
  v1::WorkerMessage in_;  // only touched by the read chain
  HeartbeatPacer pacer_{impl_->core->heartbeat_interval()};  // read chain only
  HeartbeatPacer other_pacer_{absl::Seconds(1), kWorkerMessagesPerSecond};  // read chain only
  HeartbeatPacer log_pacer_{absl::Seconds(1), kLogUnitsPerSecond};           // read chain only
  LineBudget log_budget_{/*per_second=*/5, /*burst=*/20};    // read chain only
  grpc::Alarm alarm_;  // the read chain's pause (heartbeat flood)
  std::string session_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::CoordinatorMessage> queue_ ABSL_GUARDED_BY(mu_);
};

// ------------------------------------------------------------- watch job

// The job's status now and after every change (coalesced: an unchanged
// status is not sent again); ends OK after the final state is written.
class WatchReactor final
    : public WritePump<grpc::ServerWriteReactor<v1::JobStatus>, v1::JobStatus> {
 public:
  // `caller`: the key its place was reserved under (ReserveWatcher).
  WatchReactor(Impl* impl, std::string job, std::string caller)
      : impl_(impl), job_(std::move(job)), caller_(std::move(caller)) {
    impl_->AddWatcher(job_, this);
    Poke();
  }
  void OnDone() override {
    impl_->RemoveWatcher(job_, caller_, this);
    delete this;
  }

 private:
  Next NextLocked(v1::JobStatus* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (final_sent_) return Finish(grpc::Status::OK);
    absl::StatusOr<v1::JobStatus> st = impl_->core->GetJob(job_);
    if (!st.ok()) return Finish(ToGrpcStatus(st.status()));
    std::string bytes = st->SerializeAsString();
    if (bytes == last_) return Idle();  // nothing new
    last_ = std::move(bytes);
    final_sent_ = IsFinal(st->state());
    *out = std::move(*st);
    return Write();
  }

  Impl* const impl_;
  const std::string job_;
  const std::string caller_;
  std::string last_ ABSL_GUARDED_BY(mu_);
  bool final_sent_ ABSL_GUARDED_BY(mu_) = false;
};

// -------------------------------------------------------------- get logs

// Chunks of the job's rank logs (JobLogs) from the requested offset (for
// every rank, each listed rank from its rank_offsets entry); with `follow`,
// new data as it is appended, until the job has ended and every byte is
// sent.
class LogsReactor final
    : public WritePump<grpc::ServerWriteReactor<v1::LogChunk>, v1::LogChunk> {
 public:
  // `caller`: the key its place was reserved under (ReserveWatcher).
  LogsReactor(Impl* impl, const v1::GetLogsRequest& req, std::string caller)
      : impl_(impl), req_(req), caller_(std::move(caller)) {
    {
      absl::MutexLock l(&mu_);
      if (req_.rank() >= 0) offsets_[req_.rank()] = FirstOffset();
    }
    impl_->AddWatcher(req_.job_id(), this);
    Poke();
  }
  void OnDone() override {
    impl_->RemoveWatcher(req_.job_id(), caller_, this);
    delete this;
  }

 private:
  int64_t FirstOffset() const { return std::max<int64_t>(0, req_.offset()); }
  // Where rank `rank`'s log starts for every rank's stream: where the
  // follower left it (rank_offsets, checked by CheckLogRequest: ranks of
  // the job, offsets >= 0), else `offset`. Only ranks that have a log are
  // read, however many rank_offsets names.
  int64_t FirstOffsetOf(int rank) const {
    auto it = req_.rank_offsets().find(rank);
    return it != req_.rank_offsets().end() ? it->second : FirstOffset();
  }
  Next NextLocked(v1::LogChunk* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const JobLogs& logs = impl_->core->logs();
    // Read the job's finality first: data appended before it ended is sent.
    const bool final = impl_->core->JobFinal(req_.job_id());
    if (req_.rank() < 0) {  // every rank's file, as they appear
      absl::StatusOr<std::vector<int>> ranks = logs.Ranks(req_.job_id());
      if (ranks.ok())
        for (int rank : *ranks) {
          if (!offsets_.count(rank)) offsets_.emplace(rank, FirstOffsetOf(rank));
        }
    }
    for (auto& [rank, offset] : offsets_) {
      absl::StatusOr<JobLogs::Chunk> chunk =
          logs.Read(req_.job_id(), rank, offset, kLogChunkBytes);
      if (!chunk.ok() || chunk->data.empty()) continue;  // no file or nothing new
      out->Clear();
      out->set_rank(rank);
      if (chunk->from > offset)  // the size cap dropped what lay between
        out->set_data(absl::StrCat("[frameworm: bytes ", offset, "-", chunk->from,
                                   " of this log were dropped (--max-log-bytes)]\n"));
      out->mutable_data()->append(chunk->data);
      offset = chunk->from + static_cast<int64_t>(chunk->data.size());
      out->set_end_offset(offset);
      return Write();
    }
    if (!req_.follow() || final) return Finish(grpc::Status::OK);
    return Idle();
  }

  Impl* const impl_;
  const v1::GetLogsRequest req_;
  const std::string caller_;
  std::map<int, int64_t> offsets_ ABSL_GUARDED_BY(mu_);
};

// Receives rank 0's copy of a checkpoint (CheckpointCopies): the first
// chunk names it, the last carries the checksum; any error ends the call
// with that error and leaves no file.
class UploadReactor final : public grpc::ServerReadReactor<v1::CheckpointChunk> {
 public:
  UploadReactor(Impl* impl, grpc::CallbackServerContext* ctx, v1::UploadCheckpointResponse* resp)
      : impl_(impl), ctx_(ctx), resp_(resp) {
    impl_->idle_calls.Seen(ctx_);
    StartRead(&chunk_);
  }
  // The next chunk is read while this one is appended (its bytes are moved
  // out first); mu_ keeps the appends in order, as a later OnReadDone may
  // start before this one returns.
  void OnReadDone(bool ok) override {
    absl::MutexLock l(&mu_);
    if (failed_) return;
    if (ok) impl_->idle_calls.Seen(ctx_);
    if (!ok && ctx_->IsCancelled()) {  // by the client, or idle (idle_calls): no commit
      return Fail(absl::CancelledError("checkpoint upload cancelled"));
    }
    if (!ok) {  // the client finished sending
      // No longer idle whatever the commit's fsync takes (seconds for a
      // large copy on a busy disk): the reaper must not cancel it now.
      impl_->idle_calls.Gone(ctx_);
      if (!incoming_) return Finish(ToGrpcStatus(absl::InvalidArgumentError(
          "checkpoint upload sent no chunk")));
      // A copy must stay the file its step's record describes: other bytes
      // for a step already recorded (a generation that saved that step
      // again) do not replace it, or every download of it would then fail
      // the record's checksum.
      absl::Status s = impl_->core->CheckCopyMatchesRecord(ref_, step_, checksum_);
      if (s.ok()) s = incoming_->Commit(checksum_);
      if (s.ok()) resp_->set_bytes(incoming_->received());
      return Finish(ToGrpcStatus(s));
    }
    if (!incoming_) {
      if (!slot_) {  // only a caller allowed to upload may take a slot
        if (absl::Status s = impl_->core->CheckCheckpointUpload(chunk_.ref()); !s.ok()) {
          return Fail(s);
        }
        if (absl::Status s = impl_->AcquireUpload(chunk_.ref().job_id()); !s.ok()) return Fail(s);
        slot_ = chunk_.ref().job_id();
        ref_ = chunk_.ref();
      }
      auto in = impl_->core->BeginCheckpointUpload(chunk_.ref(), chunk_.step(),
                                                   chunk_.total_bytes());
      if (!in.ok()) return Fail(in.status());
      incoming_ = *std::move(in);
      step_ = chunk_.step();
    } else if (absl::Status s = impl_->core->CheckCheckpointUpload(ref_); !s.ok()) {
      // A slot is held only while the generation that took it runs: an
      // upload trickled past its generation's end (or its job's) is cut.
      return Fail(s);
    }
    std::string data;
    data.swap(*chunk_.mutable_data());
    if (!chunk_.checksum().empty()) checksum_ = chunk_.checksum();
    StartRead(&chunk_);
    if (absl::Status s = incoming_->Append(data); !s.ok()) return Fail(s);
  }
  void OnDone() override {
    impl_->idle_calls.Gone(ctx_);
    {
      absl::MutexLock l(&mu_);
      if (slot_) impl_->ReleaseUpload(*slot_);
    }
    delete this;
  }

 private:
  // Ends the call once; reads still in flight end with ok=false and are
  // ignored.
  void Fail(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    failed_ = true;
    Finish(ToGrpcStatus(s));
  }

  Impl* const impl_;
  grpc::CallbackServerContext* const ctx_;
  v1::UploadCheckpointResponse* const resp_;
  absl::Mutex mu_;
  v1::CheckpointChunk chunk_;
  std::unique_ptr<ReceivedFile> incoming_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> slot_ ABSL_GUARDED_BY(mu_);  // the job counted in impl_
  v1::JobRef ref_ ABSL_GUARDED_BY(mu_);  // the first chunk's: checked again at each chunk
  std::string checksum_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

// The job `id` exists and `caller` may see and control it (access.h).
absl::Status JobAllowed(Impl* impl, const Caller& caller, const std::string& id) {
  if (absl::Status s = CheckJobClient(caller); !s.ok()) return s;
  absl::StatusOr<std::string> owner = impl->core->JobOwner(id);
  if (!owner.ok()) return owner.status();
  return CheckJobAccess(caller, id, *owner);
}


// A unary reactor finished with `status`.
grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(ToGrpcStatus(status));
  return r;
}

// ------------------------------------------------------------- services

class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  explicit JobServiceImpl(Impl* impl) : impl_(impl) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override {
    const Caller caller = CallerOf(*ctx);
    if (absl::Status s = CheckJobClient(caller); !s.ok()) return Done(ctx, s);
    v1::JobSpec spec = req->spec();
    if (!req->spec_yaml().empty()) {
      if (req->has_spec()) {
        return Done(ctx, absl::InvalidArgumentError("SubmitJob takes spec or spec_yaml, not both"));
      }
      if (req->spec_yaml().size() > 64 * 1024) {
        return Done(ctx, absl::InvalidArgumentError(absl::StrCat(
                             "spec_yaml of ", req->spec_yaml().size(), " bytes; at most 65536")));
      }
      absl::StatusOr<v1::JobSpec> parsed = ParseJobSpecYaml(req->spec_yaml(), "spec_yaml");
      if (!parsed.ok()) return Done(ctx, parsed.status());
      spec = *std::move(parsed);
    }
    absl::StatusOr<std::string> id = impl_->core->SubmitJob(spec, caller.Owner());
    if (id.ok()) resp->set_job_id(*id);
    return Done(ctx, id.status());
  }
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* req,
                                   v1::JobStatus* resp) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return Done(ctx, s);
    absl::StatusOr<v1::JobStatus> st = impl_->core->GetJob(req->job_id());
    if (st.ok()) *resp = std::move(*st);
    return Done(ctx, st.status());
  }
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override {
    const Caller caller = CallerOf(*ctx);
    if (absl::Status s = CheckJobClient(caller); !s.ok()) return Done(ctx, s);
    auto page =
        TakeJobPage(JobsSeenBy(caller, impl_->core->ListJobs()), req->page_size(), req->page_token());
    if (!page.ok()) return Done(ctx, page.status());
    for (auto& j : page->items) *resp->add_jobs() = std::move(j);
    resp->set_next_page_token(page->next_token);
    return Done(ctx, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* req,
                                      v1::CancelJobResponse* resp) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return Done(ctx, s);
    absl::StatusOr<v1::JobStatus> st = impl_->core->CancelJob(req->job_id());
    if (st.ok()) *resp->mutable_job() = std::move(*st);
    return Done(ctx, st.status());
  }
  grpc::ServerWriteReactor<v1::JobStatus>* WatchJob(
      grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* req) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return new Refused<grpc::ServerWriteReactor<v1::JobStatus>>(s);
    const std::string caller = CallerOf(*ctx).Owner();
    if (absl::Status s = impl_->ReserveWatcher(req->job_id(), caller); !s.ok())
      return new Refused<grpc::ServerWriteReactor<v1::JobStatus>>(s);
    return new WatchReactor(impl_, req->job_id(), caller);
  }
  grpc::ServerUnaryReactor* RequestCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::RequestCheckpointRequest* req,
      v1::RequestCheckpointResponse* resp) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return Done(ctx, s);
    absl::StatusOr<int64_t> at = impl_->core->RequestCheckpoint(req->job_id());
    if (at.ok()) resp->set_at_step(*at);
    return Done(ctx, at.status());
  }
  grpc::ServerUnaryReactor* ListCheckpoints(
      grpc::CallbackServerContext* ctx, const v1::ListCheckpointsRequest* req,
      v1::ListCheckpointsResponse* resp) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return Done(ctx, s);
    auto list = impl_->core->ListCheckpoints(req->job_id());
    if (list.ok())
      for (auto& c : *list) *resp->add_checkpoints() = std::move(c);
    return Done(ctx, list.status());
  }
  grpc::ServerUnaryReactor* DebugJob(grpc::CallbackServerContext* ctx,
                                     const v1::DebugJobRequest* req,
                                     v1::DebugJobResponse* resp) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return Done(ctx, s);
    auto r = impl_->core->DebugJob(req->job_id(), req->rank());
    if (r.ok()) {
      for (int rank : r->ranks) resp->add_ranks(rank);
      resp->set_generation(r->generation);
      resp->set_marker(r->marker);
      for (const auto& [rank, rec] : r->recorders) {
        v1::RankRecorder* out = resp->add_recorders();
        out->set_rank(rank);
        out->set_ping_age_seconds(absl::ToDoubleSeconds(r->now - rec.at));
        *out->mutable_collectives() = ToCollectiveProgress(rec);
      }
      resp->set_collectives(r->collectives);
    }
    return Done(ctx, r.status());
  }
  grpc::ServerWriteReactor<v1::CheckpointData>* GetCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::GetCheckpointRequest* req) override {
    using Reactor = grpc::ServerWriteReactor<v1::CheckpointData>;
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return new Refused<Reactor>(s);
    auto found = impl_->core->CheckpointForUser(req->job_id(), req->step());
    if (!found.ok()) return new Refused<Reactor>(found.status());
    v1::CheckpointData head;
    head.set_step(found->first.step());
    head.set_checksum(found->first.checksum());
    return new FileSendReactor<v1::CheckpointData>(ctx, &impl_->idle_calls, found->second,
                                                   "the checkpoint copy", std::move(head));
  }
  grpc::ServerUnaryReactor* GetMetrics(grpc::CallbackServerContext* ctx,
                                       const v1::GetMetricsRequest* req,
                                       v1::GetMetricsResponse* resp) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return Done(ctx, s);
    auto steps = impl_->core->GetMetrics(req->job_id(), req->since_step());
    if (!steps.ok()) return Done(ctx, steps.status());
    auto page = TakePage(*std::move(steps), req->page_size(), req->page_token(), 5000, 20000,
                         [](const v1::AggregatedStep& s) { return NumericPageKey(s.step()); });
    if (!page.ok()) return Done(ctx, page.status());
    for (auto& s : page->items) *resp->add_steps() = std::move(s);
    resp->set_next_page_token(page->next_token);
    return Done(ctx, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* ListWorkers(
      grpc::CallbackServerContext* ctx, const v1::ListWorkersRequest* req,
      v1::ListWorkersResponse* resp) override {
    if (absl::Status s = CheckJobClient(CallerOf(*ctx)); !s.ok()) return Done(ctx, s);
    auto page = TakePage(impl_->core->ListWorkers(), req->page_size(), req->page_token(), 1000,
                         5000, [](const v1::WorkerInfo& w) { return w.name(); });
    if (!page.ok()) return Done(ctx, page.status());
    for (auto& w : page->items) *resp->add_workers() = std::move(w);
    resp->set_next_page_token(page->next_token);
    return Done(ctx, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* ctx,
                                       const v1::ListEventsRequest* req,
                                       v1::ListEventsResponse* resp) override {
    const Caller caller = CallerOf(*ctx);
    if (absl::Status s = CheckJobClient(caller); !s.ok()) return Done(ctx, s);
    if (req->after_seq() < 0 || req->limit() < 0 || req->limit() > 10000) {
      return Done(ctx, absl::InvalidArgumentError(absl::StrCat(
                           "ListEvents needs after_seq >= 0 and limit in 0..10000, got after_seq ",
                           req->after_seq(), " and limit ", req->limit())));
    }
    const int limit = req->limit() == 0 ? 1000 : req->limit();
    std::optional<std::string> job;
    if (!req->job_id().empty()) {
      if (absl::Status s = JobAllowed(impl_, caller, req->job_id()); !s.ok()) return Done(ctx, s);
      job = req->job_id();
    }
    auto events = impl_->core->ListEvents(job, req->after_seq(), limit);
    if (!events.ok()) return Done(ctx, events.status());
    // Every event, filtered: the cluster's, and those of jobs the caller
    // sees (an expired job's leftovers only to those who see every job);
    // within kMaxPageBytes (events carry placements and paths), the cursor
    // stopping at the last one looked at.
    const std::map<std::string, std::string> owners =
        job ? std::map<std::string, std::string>() : impl_->core->JobOwners();
    auto [page, next] = TakeEventPage(*std::move(events), req->after_seq(), [&](const v1::Event& e) {
      if (job || e.job_id().empty()) return true;
      auto owner = owners.find(e.job_id());
      return SeesJob(caller, owner == owners.end() ? std::string() : owner->second);
    });
    resp->set_next_after_seq(next);
    for (v1::Event& e : page) *resp->add_events() = std::move(e);
    return Done(ctx, absl::OkStatus());
  }
  grpc::ServerWriteReactor<v1::LogChunk>* GetLogs(
      grpc::CallbackServerContext* ctx, const v1::GetLogsRequest* req) override {
    if (absl::Status s = JobAllowed(impl_, CallerOf(*ctx), req->job_id()); !s.ok())
      return new Refused<grpc::ServerWriteReactor<v1::LogChunk>>(s);
    const std::map<int, int64_t> rank_offsets(req->rank_offsets().begin(),
                                              req->rank_offsets().end());
    if (absl::Status s = impl_->core->CheckLogRequest(req->job_id(), req->rank(), req->offset(),
                                                      rank_offsets);
        !s.ok()) {
      return new Refused<grpc::ServerWriteReactor<v1::LogChunk>>(s);
    }
    const std::string caller = CallerOf(*ctx).Owner();
    if (absl::Status s = impl_->ReserveWatcher(req->job_id(), caller); !s.ok())
      return new Refused<grpc::ServerWriteReactor<v1::LogChunk>>(s);
    return new LogsReactor(impl_, *req, caller);
  }

 private:
  Impl* const impl_;
};

class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
 public:
  explicit WorkerServiceImpl(Impl* impl) : impl_(impl) {}
  grpc::ServerUnaryReactor* RegisterWorker(
      grpc::CallbackServerContext* ctx, const v1::RegisterWorkerRequest* req,
      v1::RegisterWorkerResponse* resp) override {
    if (absl::Status s = CheckWorkerClient(CallerOf(*ctx), req->name()); !s.ok())
      return Done(ctx, s);
    auto reg = impl_->core->RegisterWorker(*req);
    if (reg.ok()) {
      resp->set_session_id(reg->session_id);
      resp->set_heartbeat_interval_s(reg->heartbeat_interval_s);
      resp->set_receipts(true);
    }
    return Done(ctx, reg.status());
  }
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* ctx) override {
    // Which worker: the session id (unguessable) in its first message.
    if (absl::Status s = CheckWorkerSession(CallerOf(*ctx)); !s.ok()) {
      return new Refused<grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>>(s);
    }
    return new SessionReactor(impl_);
  }

 private:
  Impl* const impl_;
};

class TrainerServiceImpl final : public v1::TrainerService::CallbackService {
 public:
  explicit TrainerServiceImpl(Impl* impl) : impl_(impl) {}
  // Both finish once the reports' aggregates are committed (by the core's
  // metric writer thread) or refused: the reactor never waits on disk.
  grpc::ServerUnaryReactor* ReportStep(grpc::CallbackServerContext* ctx,
                                       const v1::StepMetrics* req,
                                       v1::ReportStepResponse* resp) override {
    return Report(ctx, resp, [&](Coordinator::ReportDone done) {
      impl_->core->ReportStepAsync(*req, std::move(done));
    });
  }
  grpc::ServerUnaryReactor* ReportSteps(grpc::CallbackServerContext* ctx,
                                        const v1::StepReports* req,
                                        v1::ReportStepResponse* resp) override {
    return Report(ctx, resp, [&](Coordinator::ReportDone done) {
      impl_->core->ReportStepsAsync(*req, std::move(done));
    });
  }
  grpc::ServerUnaryReactor* ReportCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::CheckpointRecord* req,
      v1::ReportCheckpointResponse* resp) override {
    if (absl::Status s = CheckTrainerClient(CallerOf(*ctx)); !s.ok()) return Done(ctx, s);
    auto expired = impl_->core->ReportCheckpoint(*req);
    if (expired.ok())
      for (auto& p : *expired) resp->add_expired(p);
    return Done(ctx, expired.status());
  }
  grpc::ServerReadReactor<v1::CheckpointChunk>* UploadCheckpoint(
      grpc::CallbackServerContext* ctx, v1::UploadCheckpointResponse* resp) override {
    if (absl::Status s = CheckTrainerClient(CallerOf(*ctx)); !s.ok()) {
      return new Refused<grpc::ServerReadReactor<v1::CheckpointChunk>>(s);
    }
    return new UploadReactor(impl_, ctx, resp);
  }
  grpc::ServerUnaryReactor* ReportBadCheckpoint(grpc::CallbackServerContext* ctx,
                                                const v1::BadCheckpoint* req,
                                                v1::BadCheckpointResponse* resp) override {
    if (absl::Status s = CheckTrainerClient(CallerOf(*ctx)); !s.ok()) return Done(ctx, s);
    absl::StatusOr<bool> kept = impl_->core->ReportBadCheckpoint(*req);
    if (kept.ok()) resp->set_kept(*kept);
    return Done(ctx, kept.status());
  }
  grpc::ServerWriteReactor<v1::CheckpointChunk>* DownloadCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::DownloadCheckpointRequest* req) override {
    if (absl::Status s = CheckTrainerClient(CallerOf(*ctx)); !s.ok())
      return new Refused<grpc::ServerWriteReactor<v1::CheckpointChunk>>(s);
    std::string checksum;
    absl::StatusOr<std::string> path =
        impl_->core->CheckpointCopyOf(req->ref(), req->path(), &checksum);
    if (!path.ok()) {
      return new Refused<grpc::ServerWriteReactor<v1::CheckpointChunk>>(path.status());
    }
    // The record's checksum rides on the first chunk: the trainer checks
    // what it received against it (a copy damaged on this disk since).
    v1::CheckpointChunk head;
    head.set_checksum(checksum);
    return new FileSendReactor<v1::CheckpointChunk>(ctx, &impl_->idle_calls, *path,
                                                    "the checkpoint copy", std::move(head));
  }

 private:
  // A trainer's report call: the caller is checked, then `start` hands the
  // core a callback that finishes the reactor with the core's answer.
  template <class Start>
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx, v1::ReportStepResponse* resp,
                                   Start&& start) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (absl::Status s = CheckTrainerClient(CallerOf(*ctx)); !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    start([reactor, resp](absl::StatusOr<v1::ReportStepResponse> r) {
      if (r.ok()) *resp = std::move(*r);
      reactor->Finish(ToGrpcStatus(r.status()));
    });
    return reactor;
  }

  Impl* const impl_;
};

}  // namespace

struct CoordinatorService::Services {
  explicit Services(Impl* impl) : job(impl), worker(impl), trainer(impl) {}
  JobServiceImpl job;
  WorkerServiceImpl worker;
  TrainerServiceImpl trainer;
};

CoordinatorService::CoordinatorService(Coordinator* core, absl::Duration stream_idle)
    : impl_(std::make_unique<Impl>(core, stream_idle)),
      services_(std::make_unique<Services>(impl_.get())) {
  core->SetListener(this);
}

CoordinatorService::~CoordinatorService() { impl_->core->SetListener(nullptr); }

std::vector<grpc::Service*> CoordinatorService::services() {
  return {&services_->job, &services_->worker, &services_->trainer};
}

void CoordinatorService::SessionHasCommands(const std::string& session_id) {
  impl_->PokeSession(session_id);
}

void CoordinatorService::JobChanged(const std::string& job_id) {
  impl_->PokeJob(job_id);
}

}  // namespace frameworm::coordinator
