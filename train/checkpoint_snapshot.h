// The state a checkpoint holds, taken from a trainer at one step, and its
// serialization into a checkpoint file (train/checkpoint_file.h layout; the
// payload is a LibTorch archive with the keys Trainer::load_checkpoint
// reads: model/param/*, model/buffer/*, optimizer, state/*).
//
// Take(freeze = true) makes the snapshot independent of later training:
// parameters, buffers and the RNG state are copied to CPU memory (pinned
// memory for tensors on a GPU: one DMA per tensor, then one wait). The
// optimizer's state tensors (SGD, Adam, AdamW, Adagrad, RMSprop): on the
// CPU they are handed to the snapshot and the optimizer goes on with copies
// of them (the same cost as copying, no extra serialization); on a GPU the
// snapshot holds pinned host copies, so it uses no GPU memory and its write
// never touches the GPU. Any other optimizer is serialized to bytes at once
// (serialized_at_take() says which). With freeze = false the snapshot
// refers to the live tensors: write it before the next step.
//
// defer_copies (with freeze; CheckFreq's pipelining): Take copies only what
// a forward pass changes (buffers, e.g. batch-norm statistics) and the RNG
// state; the host copies of parameters and optimizer state are left to
// CopyDeferred(), which a background thread runs while the next step's
// forward and backward read the live tensors. Until CopyDeferred() has
// returned the caller must not change parameters or optimizer state in
// place (the optimizer's step, a load); the optimizer keeps its own tensors
// throughout. Tensors on a GPU are copied in Take as without the flag.
//
// WriteTo streams the archive straight into a CheckpointFileWriter (no
// in-memory copy of the payload); the result is as WriteCheckpointFile's.
//
// Thread safety: Take runs on the training thread; a frozen snapshot may
// then be written from any one thread while training goes on.
#ifndef FRAMEWORM_TRAIN_CHECKPOINT_SNAPSHOT_H_
#define FRAMEWORM_TRAIN_CHECKPOINT_SNAPSHOT_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "train/checkpoint_file.h"

namespace frameworm {

struct CheckpointPosition {
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t batch_in_epoch = 0;
  int64_t world_size = 1;
  // The monitored validation metric's best value and the evaluations
  // since (TrainerOptions::monitor); NaN: none yet.
  double best = std::numeric_limits<double>::quiet_NaN();
  int64_t since_best = 0;
};

class CheckpointSnapshot {
 public:
  // `recycle`: a written snapshot whose memory the new one reuses where
  // shapes and types match (copies into warm pages instead of fresh
  // allocations: most of a snapshot's cost); may be null.
  // Errors: INTERNAL when LibTorch fails copying or serializing (or an
  // allocation fails); the optimizer is then left as it was: its state
  // tensors are its own, with their values.
  static absl::StatusOr<std::unique_ptr<CheckpointSnapshot>> Take(
      torch::nn::Module& module, torch::optim::Optimizer& optimizer,
      const CheckpointPosition& position, bool freeze,
      std::unique_ptr<CheckpointSnapshot> recycle = nullptr, bool defer_copies = false);

  // Makes the copies Take deferred (at once when there are none), on up to
  // 2 threads. Call once, from one thread, before WriteTo. Errors: INTERNAL.
  absl::Status CopyDeferred();
  bool has_deferred_copies() const { return !deferred_.empty(); }

  // Errors: FAILED_PRECONDITION while deferred copies are not made; else
  // as CheckpointFileWriter.
  absl::StatusOr<CheckpointFileInfo> WriteTo(const std::string& path) const;

  // True when Take serialized the whole checkpoint (unknown optimizer).
  bool serialized_at_take() const { return !payload_.empty(); }

  // The parameters as held (frozen: CPU copies), by name; empty when
  // serialized_at_take(). For tests and diagnostics.
  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }
  // The optimizer state tensors it holds (frozen, known optimizer: apart
  // from the optimizer's own); empty otherwise. For tests and diagnostics.
  const std::vector<torch::Tensor>& optimizer_tensors() const { return handed_over_; }

 private:
  CheckpointSnapshot() = default;
  std::vector<std::pair<std::string, torch::Tensor>> params_, buffers_;
  std::unique_ptr<torch::serialize::OutputArchive> optimizer_;
  std::vector<torch::Tensor> handed_over_;  // the optimizer's, in optimizer_
  std::string payload_;  // the whole archive, when serialized at Take
  CheckpointPosition position_;
  torch::Tensor rng_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> deferred_;  // (snapshot's, live)
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_CHECKPOINT_SNAPSHOT_H_
