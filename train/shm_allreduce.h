// Intra-node allreduce (sum) of CPU float32 buffers through POSIX shared
// memory, for process groups whose ranks all run on this machine (the role
// of NCCL's intra-node shm transport; Gloo would go through TCP loopback).
//
// Setup (Create, collective over all ranks of the group):
//   rank 0 creates a segment "/frameworm-shm-<pid>-<random>" (shm_open
//   O_EXCL, posix_fallocate so a too small /dev/shm fails here and not with
//   SIGBUS later, mmap) and publishes its name in the store; every other
//   rank reads the name from the store and maps it. Every rank then posts
//   its outcome to the store and waits (up to options.timeout) for every
//   other rank's outcome, so all ranks return the same verdict: OK on all,
//   or an error on all naming the rank(s) that failed or never arrived.
//   Rank 0 shm_unlink()s the name as soon as every rank has answered (or
//   on any failure), so the segment disappears with the last mapping even
//   if a process crashes later.
//
// Segment layout: a header, one cache-line-aligned control block per rank
// (its pid and a monotonically increasing barrier counter), then one input
// slot per rank and a result area, each capacity_bytes long, then one
// region of options.shared_bytes per rank (none when 0).
//
// Allreduce(data, n, divisor) sums `data` element-wise across ranks and
// divides each sum by `divisor` (the world size gives the mean; 1, the
// default, the plain sum): element i becomes (x_0[i] + ... + x_w-1[i]) /
// divisor, computed in float in that order on every rank (a power-of-two
// divisor is applied as a product with its exact reciprocal, which rounds
// to the same float as the quotient; the loops are
// vectorized for the CPU that runs them; per element the arithmetic is the
// same). It works in place, in chunks of capacity_bytes: copy the parts of
// the chunk that other ranks reduce into this rank's slot, barrier, reduce
// this rank's 1/world share of the chunk over all slots (this rank's own
// addend read from `data`; in rank order, so every rank gets bit-identical
// results) into the result area (and straight into its own buffer),
// barrier, copy the other ranks' shares out. The next chunk's (or call's) first barrier
// keeps anyone from overwriting the result before all ranks copied it out.
//
// AllreduceShared(offset, n, divisor) gives the same result for a buffer
// that already lies in this rank's region (shared_buffer() + offset, the
// same offset and n on every rank), without the slots: barrier, reduce this
// rank's share reading every rank's region where it lies (in rank order)
// and write the mean into every rank's region (each peer's addend there is
// read before it is overwritten), barrier. Two barriers suffice: a region
// is next written by its owner (e.g. the next step's gradients) after the
// second, and read by a peer only after the next call's first. Per rank
// that moves about 2 bytes per byte of buffer where Allreduce moves 4. A rank must not touch its region between the call's start and return;
// outside calls, only its owner reads or writes it. Only its owner ever
// reads the addends of its own share (SharedShare(n)), so the caller may
// leave them where they are (`own`: pieces of that share in this process's
// memory, e.g. autograd's gradients) instead of copying them into the
// region; the share's mean is still written into the region.
//
// Broadcast(values, n, root) copies root's n int64 values (n <= 8) to every
// rank: the root writes them into one of two small buffers in the header
// (alternating per call), one barrier, the others read. Reusing a buffer two
// calls later is safe: the root writes it only after passing the barrier of
// the call in between, which every rank reaches after its read. The small
// agreements of a training step (rank 0's step action) cost one barrier
// here instead of a Gloo round trip through TCP loopback and its threads.
//
// Waiting spins briefly and then sched_yield()s (ranks may share a core).
// A wait never hangs: past options.timeout it returns DEADLINE_EXCEEDED
// naming the rank(s) that did not arrive; a peer whose process is gone
// (kill(pid, 0) fails or it is a zombie) or that destroyed its
// ShmAllreduce gives UNAVAILABLE at once; a peer that failed a call marks
// the segment aborted and the others get ABORTED. After any error the
// instance is unusable (every later call returns FAILED_PRECONDITION).
//
// Concurrency: one instance is used by one thread at a time; every rank
// must make the same sequence of Allreduce calls with the same n (like any
// collective). Different instances are independent.
#ifndef FRAMEWORM_TRAIN_SHM_ALLREDUCE_H_
#define FRAMEWORM_TRAIN_SHM_ALLREDUCE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

struct ShmAllreduceOptions {
  // Store key prefix for the rendezvous; all ranks of one instance must use
  // the same name, and each Create on a store needs a fresh name (the
  // trainer appends a per-process creation counter).
  std::string name = "frameworm-shm";
  int rank = 0;
  int world_size = 1;
  // Per slot, rounded up to 64 bytes. Larger tensors go in chunks; 256 KiB
  // keeps a chunk's slots and result in L2 (on the 2-core bench machine
  // this beat 1-25 MiB slots by 1.3-2x for 25-100 MB tensors).
  int64_t capacity_bytes = 256 << 10;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Per rank, rounded up to 4 KiB: the region for AllreduceShared's
  // buffers (0: none). Counts against /dev/shm like the slots.
  int64_t shared_bytes = 0;
};

class ShmAllreduce {
 public:
  // Collective. Errors: INVALID_ARGUMENT for a bad rank/world/capacity;
  // RESOURCE_EXHAUSTED when the segment cannot be created (e.g. /dev/shm
  // too small); UNAVAILABLE when a rank could not map it;
  // DEADLINE_EXCEEDED naming the ranks that did not arrive in time.
  static absl::StatusOr<std::unique_ptr<ShmAllreduce>> Create(
      const ShmAllreduceOptions& options, c10d::Store& store);
  ~ShmAllreduce();

  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // Sums data[0, n) across ranks in place and divides by `divisor` (see
  // above for the errors; INVALID_ARGUMENT for a bad buffer or a divisor
  // that is 0 or not finite, which leaves the instance usable).
  absl::Status Allreduce(float* data, int64_t n, float divisor = 1.0f);

  // Most values one Broadcast carries.
  static constexpr int kMaxBroadcastValues = 8;
  // Every rank gets `root`'s values[0, n) in `values` (see above; the same
  // errors, and INVALID_ARGUMENT, which leaves the instance usable, for n
  // outside [0, kMaxBroadcastValues], a null buffer or a bad root).
  absl::Status Broadcast(int64_t* values, int n, int root = 0);

  // Part of this rank's own share whose addend lies outside the region:
  // elements [begin, begin + len) of the buffer, read from src.
  struct OwnAddend {
    int64_t begin = 0;
    int64_t len = 0;
    const float* src = nullptr;
  };
  // This rank's share [first, second) of a buffer of n floats in
  // AllreduceShared (whole cache lines; the same split on every rank).
  std::pair<int64_t, int64_t> SharedShare(int64_t n) const;

  // Allreduce of shared_buffer()[offset, offset + n), every rank's addend
  // read in place, except the pieces of this rank's own share in `own`
  // (sorted, disjoint, inside SharedShare(n)). See above; the same errors,
  // and INVALID_ARGUMENT, which leaves the instance usable, when the range
  // is not inside the region or a piece is not inside the share.
  absl::Status AllreduceShared(int64_t offset, int64_t n, float divisor = 1.0f,
                               const std::vector<OwnAddend>& own = {});
  // This rank's region (null when options.shared_bytes was 0), writable by
  // this rank between calls, and its length in floats.
  float* shared_buffer() const { return shared_floats_ > 0 ? region(rank_) : nullptr; }
  int64_t shared_floats() const { return shared_floats_; }

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int64_t capacity_bytes() const { return capacity_; }
  // The shm name used at setup (already unlinked once Create returned).
  const std::string& segment_name() const { return segment_name_; }

 private:
  struct Header;
  struct RankBlock;

  ShmAllreduce() = default;
  // Every rank's barrier counter reaches epoch_+1.
  absl::Status Barrier();
  absl::Status Fail(absl::Status s);
  RankBlock* block(int r) const;
  float* slot(int r) const;
  float* result() const;
  float* region(int r) const;
  // Not broken by an earlier error (every call); and a finite non-zero
  // divisor (the allreduces).
  absl::Status CheckUsable() const;
  absl::Status CheckCall(float divisor) const;

  int rank_ = 0;
  int world_ = 1;
  int64_t capacity_ = 0;  // bytes per slot
  int64_t shared_floats_ = 0;  // per rank region, in floats
  std::chrono::milliseconds timeout_{0};
  std::string segment_name_;
  void* base_ = nullptr;
  size_t size_ = 0;
  uint64_t epoch_ = 0;
  uint64_t broadcasts_ = 0;  // Broadcast calls so far (picks the buffer)
  absl::Status broken_ = absl::OkStatus();
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_SHM_ALLREDUCE_H_
