// A worker's side of peer_service.proto: it serves the checkpoints it holds
// (CheckpointHoldings) to other workers, and fetches one from them.
//
// Access: under mutual TLS only a worker certificate of the cluster may
// fetch (on a plaintext server, loopback or an operator's --insecure, any
// caller), and only with the hold's secret (HoldCheckpoint.secret, which
// the coordinator sends workers only; job code holds no certificate, only
// the cluster CA). Another caller is PERMISSION_DENIED; a wrong secret is
// NOT_FOUND, word for word what a copy not held gets (the answer does not
// tell what this worker holds). A held file that is not a regular file is
// NOT_FOUND. A request names a job and a
// step, never a path: what is served is the file the coordinator's hold
// named (checked by CheckHold), opened without following a final symlink.
//
// FetchCheckpointFrom: nothing to do when h.path already holds the bytes
// (size and checksum match: a shared filesystem). Else it tries `h.sources`
// in order; from each, the file goes
// to a partial file beside h.path that is renamed over it only once
// h.bytes arrived and h.checksum matched (common/received_file.h). A source
// whose first chunk announces another size is skipped. Each attempt has
// `timeout`. A file of at least 64 MiB comes in several streams at once
// (`streams`; 0: automatic, a quarter of the cores, 1 to 4, and 1 for
// smaller files; at most PeerServiceImpl::kMaxStreamsPerCaller), each a range [offset, offset + length) of it on a
// connection of its own, written where it belongs and checked as a whole
// (sizes, then the CRC-32 of every byte, the ranges' joined); the first
// failing stream stops the others, and a source that cannot serve ranges
// (it sends more than a range) is asked once more for the whole file in
// one stream. A source that answers RESOURCE_EXHAUSTED (busy serving
// others: PeerServiceImpl's limits) is asked again, in one stream, after
// waits doubling from 0.2 s to 4 s with random jitter, for up to 30 s (or
// `timeout`) before the next source is tried (a full local disk, also
// RESOURCE_EXHAUSTED, is not retried). Errors: the last source's error, prefixed with its endpoint
// (UNAVAILABLE, NOT_FOUND, INVALID_ARGUMENT for a size or checksum
// mismatch, INTERNAL for the local disk).
// Thread safety: the service is gRPC's (any thread); FetchCheckpointFrom
// blocks and may run on any thread. A fetcher that stops reading (no chunk
// taken for `stream_idle`) has its call cancelled, so it cannot pin the
// chunk's buffer and the held file's descriptor (rpc/idle_call_reaper.h).
#ifndef FRAMEWORM_WORKER_PEER_SERVICE_H_
#define FRAMEWORM_WORKER_PEER_SERVICE_H_

#include <atomic>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "frameworm/v1/peer_service.grpc.pb.h"
#include "rpc/idle_call_reaper.h"
#include "rpc/tls.h"
#include "worker/checkpoint_holdings.h"
#include "worker/fetch_stall_guard.h"

namespace frameworm {

class PeerServiceImpl final : public v1::PeerService::CallbackService {
 public:
  // Checkpoint streams served at once, in all and to one caller with a
  // worker certificate (by its name; plaintext callers, on loopback or
  // under --insecure, count in all only); one more is RESOURCE_EXHAUSTED
  // (each holds a descriptor and a 1 MiB chunk; FetchCheckpointFrom asks a
  // busy source again a little later). So one worker, however many calls
  // it opens, leaves room for the others.
  static constexpr int kMaxStreams = 64;
  static constexpr int kMaxStreamsPerCaller = 16;
  // `holdings` is not owned and must outlive the service.
  explicit PeerServiceImpl(const CheckpointHoldings& holdings,
                           absl::Duration stream_idle = absl::Seconds(60),
                           int max_streams = kMaxStreams,
                           int max_streams_per_caller = kMaxStreamsPerCaller)
      : holdings_(holdings),
        idle_calls_(stream_idle),
        max_streams_(max_streams),
        max_per_caller_(max_streams_per_caller) {}
  grpc::ServerWriteReactor<v1::CheckpointChunk>* FetchCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::FetchCheckpointRequest* req) override;
  // Streams refused so far for the limits above.
  int64_t busy_refusals() const { return busy_refusals_.load(); }

 private:
  const CheckpointHoldings& holdings_;
  IdleCallReaper idle_calls_;
  // A stream slot for `caller`, or why there is none.
  absl::Status TakeSlot(const std::string& caller);
  void FreeSlot(const std::string& caller);

  const int max_streams_;
  const int max_per_caller_;
  std::atomic<int64_t> busy_refusals_{0};
  absl::Mutex mu_;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;                          // being served
  std::map<std::string, int> per_caller_ ABSL_GUARDED_BY(mu_);    // (no zero entries)
};

// `stop`: once set, the fetch ends with CANCELLED within 0.1 s, even while
// a source sends nothing. A source that sends no chunk for `stall` is
// given up (DEADLINE_EXCEEDED, "the source stalled") and the next one
// tried, long before `timeout`. `*copied` (when given) says whether bytes
// were fetched (false: already in place).
absl::Status FetchCheckpointFrom(const HeldCheckpoint& h, const TlsFiles* tls,
                                 absl::Duration timeout, const std::atomic<bool>& stop,
                                 bool* copied = nullptr, int streams = 0,
                                 absl::Duration stall = kFetchStall);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_PEER_SERVICE_H_
