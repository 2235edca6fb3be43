#include "worker/peer_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/crc32.h"
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
  // A copy not held and a wrong secret get the same answer: a caller
  // without the secret learns nothing of what this worker holds.
  if (!h || h->secret.empty() || !TokensEqual(req->secret(), h->secret)) {
    return new Refused<Writer>(absl::NotFoundError(
        absl::StrCat("this worker holds no checkpoint of step ", req->step(), " of job ",
                     req->job_id(), " with that secret")));
  }
  const std::string who = caller.role == Caller::Role::kWorker ? caller.name : "";
  if (absl::Status s = TakeSlot(who); !s.ok()) return new Refused<Writer>(s);
  absl::StatusOr<int> fd = OpenHeld(*h);
  if (!fd.ok()) {
    FreeSlot(who);
    return new Refused<Writer>(fd.status());
  }
  auto* r = new FileSendReactor<v1::CheckpointChunk>(
      ctx, &idle_calls_, absl::StrCat("/proc/self/fd/", *fd),
      "this worker's copy of the checkpoint", v1::CheckpointChunk(), req->offset(),
      req->length(), [this, who] { FreeSlot(who); });
  ::close(*fd);
  return r;
}

absl::Status PeerServiceImpl::TakeSlot(const std::string& caller) {
  absl::MutexLock l(&mu_);
  if (streams_ >= max_streams_) {
    ++busy_refusals_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "this worker serves ", max_streams_, " checkpoint streams already; try again later"));
  }
  if (!caller.empty()) {  // a plaintext caller is trusted (loopback, or --insecure)
    int& mine = per_caller_[caller];
    if (mine >= max_per_caller_) {
      ++busy_refusals_;
      return absl::ResourceExhaustedError(
          absl::StrCat("this worker serves ", max_per_caller_,
                       " checkpoint streams to this caller already; try again later"));
    }
    ++mine;
  }
  ++streams_;
  return absl::OkStatus();
}

void PeerServiceImpl::FreeSlot(const std::string& caller) {
  absl::MutexLock l(&mu_);
  --streams_;
  if (caller.empty()) return;
  auto it = per_caller_.find(caller);
  if (it != per_caller_.end() && --it->second <= 0) per_caller_.erase(it);
}

namespace {

v1::FetchCheckpointRequest RequestFor(const HeldCheckpoint& h) {
  v1::FetchCheckpointRequest req;
  req.set_job_id(h.job_id);
  req.set_step(h.step);
  req.set_secret(h.secret);
  return req;
}

// A source's own answer: RESOURCE_EXHAUSTED from it (it serves as many
// streams as it may) is marked busy, so the fetch asks it again a little
// later; the local disk's RESOURCE_EXHAUSTED (full) is not.
constexpr char kSourceBusy[] = "frameworm.dev/source-busy";
absl::Status SourceAnswer(const grpc::Status& g) {
  absl::Status s = FromGrpcStatus(g);
  if (absl::IsResourceExhausted(s)) s.SetPayload(kSourceBusy, absl::Cord("1"));
  return s;
}
bool SourceBusy(const absl::Status& s) { return s.GetPayload(kSourceBusy).has_value(); }

absl::Status FetchOne(const std::string& source, const HeldCheckpoint& h, const TlsFiles* tls,
                      absl::Duration timeout, absl::Duration stall,
                      const std::atomic<bool>& stop) {
  auto stub = v1::PeerService::NewStub(MakeChannel(source, tls, kWorkerTlsName));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  StallGuard guard(&ctx, stall, stop);
  std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> reader =
      stub->FetchCheckpoint(&ctx, RequestFor(h));
  v1::CheckpointChunk chunk;
  // Written and checksummed on its own thread while the next chunk arrives.
  std::unique_ptr<QueuedFile> file;
  absl::Status failed;
  while (failed.ok() && reader->Read(&chunk)) {
    // Progress is bytes: a source that sends empty chunks stalls all the same.
    if (!chunk.data().empty()) guard.Progress();
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
  if (failed.ok()) failed = guard.Ended();
  if (!failed.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return failed;
  }
  if (absl::Status s = SourceAnswer(reader->Finish()); !s.ok()) return s;
  if (!file) return absl::InvalidArgumentError("it sent no chunk");
  return file->Commit(h.checksum);
}

// How long a busy source (SourceAnswer) is asked again before the next.
constexpr absl::Duration kBusyWait = absl::Seconds(30);

// Files at least this large are fetched in several streams at once.
constexpr int64_t kRangedFetchBytes = int64_t{64} << 20;

// One stream takes about a core on each end (TLS, copies, the CRC and the
// write): a quarter of the cores, at most 4. On the 2-core bench machine
// 1, 2 and 3 streams measured the same (P9), so small hosts take one.
int AutomaticStreams(int64_t bytes) {
  if (bytes < kRangedFetchBytes) return 1;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 4, 1u, 4u));
}

struct Range {
  int64_t offset = 0, length = 0;
  uint32_t crc = 0;  // of the bytes received, in order
  absl::Status status;
};

// One stream of a ranged fetch: `r` of the file, written into `file` where
// it belongs. Stops when `abort` is set (another stream failed).
absl::Status FetchRange(const std::string& source, const HeldCheckpoint& h, const TlsFiles* tls,
                        absl::Time deadline, absl::Duration stall, const std::atomic<bool>& stop,
                        const std::atomic<bool>& abort, ReceivedFile& file, Range& r) {
  auto stub = v1::PeerService::NewStub(MakeChannel(source, tls, kWorkerTlsName));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  StallGuard guard(&ctx, stall, stop, &abort);
  v1::FetchCheckpointRequest req = RequestFor(h);
  req.set_offset(r.offset);
  req.set_length(r.length);
  std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> reader = stub->FetchCheckpoint(&ctx, req);
  v1::CheckpointChunk chunk;
  int64_t got = 0;
  bool first = true;
  absl::Status failed;
  while (failed.ok() && reader->Read(&chunk)) {
    // Progress is bytes: a source that sends empty chunks stalls all the same.
    if (!chunk.data().empty()) guard.Progress();
    if (stop.load()) {
      failed = absl::CancelledError("the worker is shutting down");
    } else if (abort.load()) {
      failed = absl::AbortedError("another stream of this fetch failed");
    } else if (first && chunk.total_bytes() != h.bytes) {
      failed = absl::InvalidArgumentError(absl::StrCat(
          "it serves ", chunk.total_bytes(), " bytes; the checkpoint has ", h.bytes));
    } else if (static_cast<int64_t>(chunk.data().size()) > r.length - got) {
      failed = absl::OutOfRangeError(absl::StrCat(
          "it sent more than the ", r.length, " bytes asked for at offset ", r.offset));
    } else {
      failed = file.WriteAt(r.offset + got, chunk.data().data(), chunk.data().size());
      r.crc = Crc32(r.crc, chunk.data().data(), chunk.data().size());
      got += static_cast<int64_t>(chunk.data().size());
    }
    first = false;
  }
  if (failed.ok()) failed = guard.Ended();
  if (!failed.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return failed;
  }
  if (absl::Status s = SourceAnswer(reader->Finish()); !s.ok()) return s;
  if (got != r.length) {
    return absl::InvalidArgumentError(absl::StrCat("it sent ", got, " of the ", r.length,
                                                   " bytes asked for at offset ", r.offset));
  }
  return absl::OkStatus();
}

// The file in `streams` ranges at once (each its own connection), checked
// as a whole: sizes, the CRC-32 of every byte (the ranges' joined), then
// renamed into place. The first failing stream stops the others.
absl::Status FetchRanges(const std::string& source, const HeldCheckpoint& h, const TlsFiles* tls,
                         absl::Duration timeout, absl::Duration stall,
                         const std::atomic<bool>& stop, int streams) {
  absl::StatusOr<std::unique_ptr<ReceivedFile>> file = ReceivedFile::Create(h.path, h.bytes);
  if (!file.ok()) return file.status();
  // Whole chunks per range, so each stream's chunks are full ones.
  const int64_t per =
      ((h.bytes + streams - 1) / streams + kMaxChunkBytes - 1) / kMaxChunkBytes * kMaxChunkBytes;
  std::vector<Range> ranges;
  for (int64_t at = 0; at < h.bytes; at += per) {
    Range r;
    r.offset = at;
    r.length = std::min(per, h.bytes - at);
    ranges.push_back(r);
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::atomic<bool> abort{false};
  auto run = [&](Range& r) {
    r.status = FetchRange(source, h, tls, deadline, stall, stop, abort, **file, r);
    if (!r.status.ok()) abort = true;
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < ranges.size(); ++i) threads.emplace_back(run, std::ref(ranges[i]));
  if (!ranges.empty()) run(ranges[0]);
  for (std::thread& t : threads) t.join();
  // The error that started it, not the others' ABORTED.
  for (const Range& r : ranges) {
    if (!r.status.ok() && !absl::IsAborted(r.status)) return r.status;
  }
  for (const Range& r : ranges) {
    if (!r.status.ok()) return r.status;
  }
  uint32_t crc = ranges.empty() ? 0 : ranges[0].crc;
  for (size_t i = 1; i < ranges.size(); ++i) crc = Crc32Combine(crc, ranges[i].crc, ranges[i].length);
  return (*file)->CommitRanges(crc, h.checksum);
}

}  // namespace

absl::Status FetchCheckpointFrom(const HeldCheckpoint& h, const TlsFiles* tls,
                                 absl::Duration timeout, const std::atomic<bool>& stop,
                                 bool* copied, int streams, absl::Duration stall) {
  if (copied != nullptr) *copied = false;
  if (absl::Status s = CheckHold(h); !s.ok()) return s;
  if (h.sources.empty()) return absl::FailedPreconditionError("no source to fetch from");
  // Already here (a shared filesystem, or this node wrote it): no copy.
  if (FileMatches(h.path, h.bytes, h.checksum)) return absl::OkStatus();
  // On the shared tmpfs (in-memory checkpoints), the directories must be
  // this user's alone: another local user must not have made them first.
  // (Spelled as the kernel reads it: "/dev//shm/x" is on it too.)
  if (const std::filesystem::path normal = std::filesystem::path(h.path).lexically_normal();
      normal.string().rfind("/dev/shm/", 0) == 0) {
    const std::filesystem::path dir = normal.parent_path();
    absl::Status mine = EnsurePrivateDirectory(dir.parent_path().string());
    if (mine.ok()) mine = EnsurePrivateDirectory(dir.string());
    if (!mine.ok()) return mine;
  }
  // No more than a source serves one caller at once.
  const int n = std::min(streams > 0 ? streams : AutomaticStreams(h.bytes),
                         PeerServiceImpl::kMaxStreamsPerCaller);
  absl::Status last;
  std::mt19937_64 jitter(std::random_device{}());
  for (const std::string& source : h.sources) {
    // A busy source (its streams all taken: a new generation's holds came
    // to every worker at once) is asked again, in one stream, after a
    // wait that doubles from 0.2 s to 4 s (each 0.5 to 1.5 times that, at
    // random, so fetchers refused together do not come back together),
    // for up to kBusyWait in all.
    bool one_stream = !(n > 1 && h.bytes > kMaxChunkBytes);
    absl::Duration backoff = absl::Milliseconds(200);
    const absl::Time give_up = absl::Now() + std::min(timeout, kBusyWait);
    for (;;) {
      if (!one_stream) {
        last = FetchRanges(source, h, tls, timeout, stall, stop, n);
        // A peer that cannot serve ranges (an older one sends the whole
        // file from byte 0), or a busy one: one stream from now on.
        if (absl::IsOutOfRange(last) || SourceBusy(last)) one_stream = true;
        if (absl::IsOutOfRange(last) && !stop.load()) {
          last = FetchOne(source, h, tls, timeout, stall, stop);
        }
      } else {
        last = FetchOne(source, h, tls, timeout, stall, stop);
      }
      if (!SourceBusy(last) || stop.load() || absl::Now() >= give_up) break;
      const absl::Duration wait =
          backoff * std::uniform_real_distribution<double>(0.5, 1.5)(jitter);
      for (const absl::Time until = absl::Now() + wait; absl::Now() < until && !stop.load();) {
        absl::SleepFor(absl::Milliseconds(20));
      }
      if (stop.load()) break;
      backoff = std::min(backoff * 2, absl::Seconds(4));
    }
    if (last.ok() && copied != nullptr) *copied = true;
    if (last.ok() || stop.load()) return last;
    last = absl::Status(last.code(), absl::StrCat("fetching ", h.job_id, "'s checkpoint of step ",
                                                  h.step, " from ", source, ": ", last.message()));
  }
  return last;
}

}  // namespace frameworm
