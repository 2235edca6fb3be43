// Data for the training library: PyTorch-compatible DistributedSampler,
// in-memory datasets (Fashion-MNIST read from its IDX .gz files with zlib,
// and a deterministic synthetic set) and a simple batching DataLoader.
//
// Thread safety: none of these classes is thread-safe; each process uses
// its own instances from its training thread.
#ifndef FRAMEWORM_TRAIN_DATA_H_
#define FRAMEWORM_TRAIN_DATA_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace frameworm {

// Exactly torch.utils.data.DistributedSampler's index sequence: with
// shuffle, torch.randperm(size) from a CPU generator seeded with
// seed + epoch; padded by repeating from the start to a multiple of
// world_size (or the tail dropped with drop_last); then every
// world_size-th index starting at rank. As in torch, rank and world_size
// default (kFromProcessGroup) to the default process group's
// (setup_distributed, or a DistributedTrainer that set one up); without
// one, rank 0 of a world of one.
class DistributedSampler {
 public:
  static constexpr int kFromProcessGroup = -1;
  DistributedSampler(int64_t size, int rank = kFromProcessGroup,
                     int world_size = kFromProcessGroup, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * world_size_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  // With rank and world size resolved (kFromProcessGroup replaced).
  DistributedSampler(int64_t size, std::pair<int, int> rank_and_world, bool shuffle,
                     uint64_t seed, bool drop_last);
  int64_t size_;
  int rank_;
  int world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

// Samples along dim 0: `images` the model's input (Fashion-MNIST: [N, 1,
// 28, 28] float), `labels` the target (class indices [N] int64, or any
// tensor for a regression loss), `inputs` further named inputs of N
// samples each (for a model whose forward takes several; a data file's
// other tensors, train/tensor_file.h).
struct Dataset {
  torch::Tensor images;
  torch::Tensor labels;
  std::map<std::string, torch::Tensor> inputs;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Fashion-MNIST normalisation: (x / 255 - 0.2860) / 0.3530.
// split: "train" (60000) or "test" (10000). Errors: NOT_FOUND for a missing
// file, DATA_LOSS for a corrupt/truncated one, INVALID_ARGUMENT for a bad
// split; each message names the file.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir,
                                         const std::string& split);

// A small learnable dataset, identical for equal (size, seed): ten random
// class prototypes plus noise.
Dataset MakeSyntheticDataset(int64_t size, uint64_t seed);

struct Batch {
  torch::Tensor data;
  torch::Tensor target;
  std::map<std::string, torch::Tensor> inputs;  // the dataset's, same rows
  int64_t size() const { return target.size(0); }
};

struct DataLoaderOptions {
  int64_t batch_size = 64;  // per process
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // passed to the sampler
};

// Batches of a dataset in the order of a DistributedSampler (world 1 until
// a DistributedTrainer calls set_distributed).
class DataLoader {
 public:
  DataLoader(Dataset dataset, DataLoaderOptions options);
  void set_distributed(int rank, int world_size);
  void set_epoch(int64_t epoch);
  int64_t num_batches() const;
  // Batch i of the current epoch (0 <= i < num_batches()).
  Batch batch(int64_t i) const;
  const DistributedSampler& sampler() const { return sampler_; }
  const Dataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  void Refresh();
  Dataset dataset_;
  DataLoaderOptions options_;
  DistributedSampler sampler_;
  torch::Tensor order_;  // this rank's indices for the current epoch
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_DATA_H_
