#include "worker/peer_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include <filesystem>

#include "common/private_dir.h"
#include "common/queued_file.h"
#include "common/received_file.h"
#include "common/token.h"
#include "rpc/file_stream.h"
#include "rpc/rpc.h"
#include "rpc/status_util.h"

namespace frameworm {
namespace {

using Writer = grpc::ServerWriteReactor<v1::CheckpointChunk>;

// The held file as "/proc/self/fd/N" of a descriptor opened with
// O_NOFOLLOW (a symlink put in its place is refused), and the descriptor,
// which the caller closes once the reactor opened its own stream.
absl::StatusOr<int> OpenHeld(const HeldCheckpoint& h) {
  const int fd = ::open(h.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {  // a FIFO, a device...
    ::close(fd);
    return absl::NotFoundError(absl::StrCat("this worker's copy of ", h.job_id,
                                            "'s checkpoint of step ", h.step,
                                            " is not a regular file"));
  }
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("this worker's copy of ", h.job_id,
                                            "'s checkpoint of step ", h.step, " is gone"));
  }
  return fd;
}

}  // namespace

grpc::ServerWriteReactor<v1::CheckpointChunk>* PeerServiceImpl::FetchCheckpoint(
    grpc::CallbackServerContext* ctx, const v1::FetchCheckpointRequest* req) {
  const Caller caller = CallerOf(*ctx);
  if (caller.role != Caller::Role::kWorker && caller.role != Caller::Role::kLocal) {
    return new Refused<Writer>(absl::PermissionDeniedError(
        absl::StrCat(caller.Describe(), " may not fetch checkpoints; only workers may")));
  }
  if (absl::Status s = CheckJobIdComponent(req->job_id()); !s.ok()) return new Refused<Writer>(s);
  std::optional<HeldCheckpoint> h = holdings_.Find(req->job_id(), req->step());
  if (h && (h->secret.empty() || !TokensEqual(req->secret(), h->secret))) {
    return new Refused<Writer>(absl::PermissionDeniedError(absl::StrCat(
        "the secret of job ", req->job_id(), "'s checkpoint of step ", req->step(),
        " does not match")));
  }
  if (!h) {
    return new Refused<Writer>(absl::NotFoundError(absl::StrCat(
        "this worker holds no checkpoint of step ", req->step(), " of job ", req->job_id())));
  }
  absl::StatusOr<int> fd = OpenHeld(*h);
  if (!fd.ok()) return new Refused<Writer>(fd.status());
  auto* r = new FileSendReactor<v1::CheckpointChunk>(absl::StrCat("/proc/self/fd/", *fd),
                                                     "this worker's copy of the checkpoint");
  ::close(*fd);
  return r;
}

namespace {

absl::Status FetchOne(const std::string& source, const HeldCheckpoint& h, const TlsFiles* tls,
                      absl::Duration timeout, const std::atomic<bool>& stop) {
  auto stub = v1::PeerService::NewStub(MakeChannel(source, tls, kWorkerTlsName));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::FetchCheckpointRequest req;
  req.set_job_id(h.job_id);
  req.set_step(h.step);
  req.set_secret(h.secret);
  std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> reader = stub->FetchCheckpoint(&ctx, req);
  v1::CheckpointChunk chunk;
  // Written and checksummed on its own thread while the next chunk arrives.
  std::unique_ptr<QueuedFile> file;
  absl::Status failed;
  while (failed.ok() && reader->Read(&chunk)) {
    if (stop.load()) {
      failed = absl::CancelledError("the worker is shutting down");
      break;
    }
    if (!file) {
      if (chunk.total_bytes() != h.bytes) {
        failed = absl::InvalidArgumentError(absl::StrCat(
            "it serves ", chunk.total_bytes(), " bytes; the checkpoint has ", h.bytes));
        break;
      }
      absl::StatusOr<std::unique_ptr<QueuedFile>> f = QueuedFile::Create(h.path, h.bytes);
      if (!f.ok()) {  // the local disk: no other source helps
        ctx.TryCancel();
        reader->Finish();
        return f.status();
      }
      file = *std::move(f);
    }
    std::string data = file->Spare();
    data.swap(*chunk.mutable_data());
    failed = file->Append(std::move(data));
  }
  if (!failed.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return failed;
  }
  if (absl::Status s = FromGrpcStatus(reader->Finish()); !s.ok()) return s;
  if (!file) return absl::InvalidArgumentError("it sent no chunk");
  return file->Commit(h.checksum);
}

}  // namespace

absl::Status FetchCheckpointFrom(const HeldCheckpoint& h, const TlsFiles* tls,
                                 absl::Duration timeout, const std::atomic<bool>& stop,
                                 bool* copied) {
  if (copied != nullptr) *copied = false;
  if (absl::Status s = CheckHold(h); !s.ok()) return s;
  if (h.sources.empty()) return absl::FailedPreconditionError("no source to fetch from");
  // Already here (a shared filesystem, or this node wrote it): no copy.
  if (FileMatches(h.path, h.bytes, h.checksum)) return absl::OkStatus();
  // On the shared tmpfs (in-memory checkpoints), the directories must be
  // this user's alone: another local user must not have made them first.
  if (h.path.rfind("/dev/shm/", 0) == 0) {
    const std::filesystem::path dir = std::filesystem::path(h.path).parent_path();
    absl::Status mine = EnsurePrivateDirectory(dir.parent_path().string());
    if (mine.ok()) mine = EnsurePrivateDirectory(dir.string());
    if (!mine.ok()) return mine;
  }
  absl::Status last;
  for (const std::string& source : h.sources) {
    last = FetchOne(source, h, tls, timeout, stop);
    if (last.ok() && copied != nullptr) *copied = true;
    if (last.ok() || stop.load()) return last;
    last = absl::Status(last.code(), absl::StrCat("fetching ", h.job_id, "'s checkpoint of step ",
                                                  h.step, " from ", source, ": ", last.message()));
  }
  return last;
}

}  // namespace frameworm
