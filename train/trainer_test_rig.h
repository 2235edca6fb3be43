// Test helpers shared by the trainer tests: an MLP with SGD (momentum 0.9)
// or Adam behind a single-process Trainer, and small synthetic loaders.
#ifndef FRAMEWORM_TRAIN_TRAINER_TEST_RIG_H_
#define FRAMEWORM_TRAIN_TRAINER_TEST_RIG_H_

#include <sys/resource.h>

#include <csignal>
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "train/data.h"
#include "train/models.h"
#include "train/trainer.h"

namespace frameworm::testutil {

struct TrainRig {
  torch::nn::Sequential model;
  std::shared_ptr<torch::optim::Optimizer> opt;
  std::unique_ptr<Trainer> trainer;
};

// Seeds torch with `seed` first, so equal seeds give equal initial weights.
inline TrainRig MakeRig(uint64_t seed, TrainerOptions o, bool adam = false) {
  torch::manual_seed(seed);
  TrainRig s;
  s.model = MakeMlp();
  if (adam) {
    s.opt = std::make_shared<torch::optim::Adam>(s.model->parameters(),
                                                 torch::optim::AdamOptions(1e-3));
  } else {
    s.opt = std::make_shared<torch::optim::SGD>(s.model->parameters(),
                                                torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  o.verbose = false;
  s.trainer = std::make_unique<Trainer>(s.model, s.opt, torch::kCPU, o);
  return s;
}

inline DataLoader TrainLoader() {
  return DataLoader(MakeSyntheticDataset(256, 1), {32, true, 3, false});
}
inline DataLoader ValLoader() {
  return DataLoader(MakeSyntheticDataset(64, 2), {32, false, 0, false});
}

// Trains `rig` on the synthetic loaders; returns train()'s status.
inline absl::Status TrainOnSynthetic(TrainRig& rig) {
  DataLoader tl = TrainLoader();
  DataLoader vl = ValLoader();
  return rig.trainer->train(tl, vl);
}

// Trains `rig` on the synthetic loaders with files limited to 4 KiB (far
// below a checkpoint: writes fail as on a full disk, EFBIG), then lifts
// the limit. Returns train()'s status.
inline absl::Status TrainWithFullDisk(TrainRig& rig) {
  struct rlimit old;
  if (::getrlimit(RLIMIT_FSIZE, &old) != 0) return absl::InternalError("getrlimit");
  auto* const old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  if (::setrlimit(RLIMIT_FSIZE, &small) != 0) return absl::InternalError("setrlimit");
  const absl::Status trained = TrainOnSynthetic(rig);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  return trained;
}

}  // namespace frameworm::testutil

#endif  // FRAMEWORM_TRAIN_TRAINER_TEST_RIG_H_
