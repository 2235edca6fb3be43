// Gradient bucketing and averaging for DistributedDataParallel semantics.
//
// The reducer puts the trainable parameters into buckets of about
// bucket_cap_bytes, in reverse parameter order (as PyTorch's DDP does,
// since backward produces gradients roughly in that order). A post hook on
// each parameter's gradient accumulator fires after the gradient has been
// accumulated into .grad; it copies the gradient into its bucket and, once
// a bucket and every bucket before it are complete, launches their
// asynchronous allreduces strictly in bucket-index order, so every rank
// issues the same collectives in the same order while backward is still
// running. Gradients end in the buckets (PyTorch DDP's
// gradient_as_bucket_view): when a parameter's gradient is ready and its
// .grad is not yet its slice of the bucket (autograd's fresh gradient after
// zero_grad(set_to_none), one accumulated locally, or one the caller set),
// the hook copies it into the slice and rebinds .grad to the slice; a .grad
// that already is the slice was accumulated in place. So a step costs one
// copy per gradient and no zeroing of the buckets. Finalize() (after backward
// returns) completes the rest: with
// find_unused_parameters a parameter that received no gradient contributes
// zeros (and a parameter unused on every rank keeps an undefined grad);
// without it such a parameter is an error naming it. It then waits for all
// works and writes the averaged gradients back into .grad.
//
// Intra-node path: with options.intra_node set (every rank of the group on
// this machine), buckets of CPU float32 gradients are not given to the
// process group; Finalize() sums them with the shared-memory allreduce, one
// bucket at a time in bucket order (identical on every rank), after
// backward, and then averages them. Other buckets (other dtypes/devices) and
// the find_unused_parameters used-map still go through the process group.
// On 2 cores there is nothing to overlap with, and the shm copy is several
// times faster than Gloo over loopback. When options.intra_node has a
// shared region big enough for all of them (ShmAllreduceOptions::
// shared_bytes), those buckets are allocated in it and summed in place
// (AllreduceShared): the gradients are then in shared memory, and a
// gradient tensor keeps the mapping alive after the reducer is gone.
//
// Thread safety: the hooks may run on autograd engine threads; the
// reducer's state is guarded by one mutex (mu_). PrepareForBackward and
// Finalize are called from the training thread only.
#ifndef FRAMEWORM_TRAIN_REDUCER_H_
#define FRAMEWORM_TRAIN_REDUCER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/flight_recorder.h"
#include "train/shm_allreduce.h"

namespace frameworm {

struct ReducerOptions {
  int64_t bucket_cap_bytes = 25 * 1024 * 1024;
  bool find_unused_parameters = false;
  // Non-null: CPU float32 buckets are summed through this intra-node
  // shared-memory allreduce (rank and world size must match the process
  // group's) instead of process_group->allreduce.
  std::shared_ptr<ShmAllreduce> intra_node;
  // Non-null: every collective the reducer issues is recorded there
  // (enqueued at launch, started/completed around Finalize's wait).
  std::shared_ptr<FlightRecorder> recorder;
};

class Reducer {
 public:
  // `params` are (name, parameter) pairs in module order; parameters that do
  // not require grad are ignored. Errors: INVALID_ARGUMENT when no parameter
  // requires grad, the process group is null, or options.intra_node's rank
  // or world size differs from the group's.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(
      std::vector<std::pair<std::string, torch::Tensor>> params,
      c10::intrusive_ptr<c10d::Backend> process_group,
      const ReducerOptions& options);
  ~Reducer();

  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Arms the hooks for the next backward. sync=false (a non-final
  // micro-batch of gradient accumulation) leaves gradients local.
  void PrepareForBackward(bool sync);

  // After backward: launch what is left, wait, average, write back.
  // Errors: FAILED_PRECONDITION naming parameters that got no gradient
  // (without find_unused_parameters); UNAVAILABLE when a collective fails;
  // the intra-node allreduce's own error (DEADLINE_EXCEEDED naming the late
  // ranks, UNAVAILABLE for a peer that exited, ABORTED) unchanged.
  absl::Status Finalize();

  // Bucket i holds these parameter indices (into the trainable list).
  const std::vector<std::vector<size_t>>& bucket_params() const {
    return bucket_params_;
  }
  // Order in which buckets were launched during the last synced backward
  // (process-group buckets in index order as they became ready, then the
  // intra-node buckets in index order from Finalize(): 0, 1, 2, ... when
  // all buckets take one path); the count launched during backward itself
  // (0 when every bucket takes the intra-node path).
  std::vector<int> last_launch_order() const;
  int last_launched_during_backward() const;
  // Number of buckets summed through options.intra_node.
  int intra_node_buckets() const { return intra_node_buckets_; }
  // options.intra_node when it sums buckets (the same on every rank: its
  // setup is collective), else null. Used by the caller between
  // collectives only (after Finalize returned).
  ShmAllreduce* intra_node() const {
    return intra_node_buckets_ > 0 ? options_.intra_node.get() : nullptr;
  }
  // How many of them lie in its shared region (summed without copying in).
  int shared_buckets() const { return shared_buckets_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offsets; // element offset of each param in flat
    torch::Tensor flat;
    std::vector<torch::Tensor> io;  // {flat}, kept alive for the work
    c10::intrusive_ptr<c10d::Work> work;
    int64_t seq = 0;  // its flight-recorder number (0: none)
    size_t pending = 0;
    int64_t numel = 0;
    bool shm = false;  // summed by options_.intra_node in Finalize
    int64_t shared_offset = -1;  // >= 0: flat lies there in intra_node's shared region
    // With shared_offset: this rank's share of the bucket (SharedShare),
    // whose addends the allreduce reads from autograd's gradients where
    // they lie (`own`, kept alive by `held`) instead of a copy.
    int64_t share_lo = 0, share_hi = 0;
    std::vector<ShmAllreduce::OwnAddend> own;
    std::vector<torch::Tensor> held;
  };

  Reducer(std::vector<std::pair<std::string, torch::Tensor>> params,
          c10::intrusive_ptr<c10d::Backend> pg, const ReducerOptions& o);
  void BuildBuckets();
  void OnGradReady(size_t index);
  // Puts parameter `index`'s gradient into its bucket slice (zeros when it
  // has none) and binds its .grad to the slice.
  void MarkReadyLocked(size_t index);
  void LaunchReadyLocked();
  // work->wait(), recorded as started/completed (or failed) under `seq`.
  void Wait(const c10::intrusive_ptr<c10d::Work>& work, int64_t seq);

  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  ReducerOptions options_;
  std::vector<std::vector<size_t>> bucket_params_;
  std::vector<size_t> param_bucket_;   // param index -> bucket
  std::vector<size_t> param_slot_;     // param index -> position in bucket
  std::vector<torch::Tensor> views_;   // param index -> its bucket slice
  int intra_node_buckets_ = 0;
  int shared_buckets_ = 0;

  mutable std::mutex mu_;
  std::vector<Bucket> buckets_;        // guarded by mu_
  std::vector<bool> ready_;            // guarded by mu_
  std::vector<bool> used_;             // guarded by mu_
  size_t next_launch_ = 0;             // guarded by mu_
  bool armed_ = false;                 // guarded by mu_
  bool in_backward_ = false;           // guarded by mu_
  std::vector<int> launch_order_;      // guarded by mu_
  int launched_in_backward_ = 0;       // guarded by mu_
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_REDUCER_H_
