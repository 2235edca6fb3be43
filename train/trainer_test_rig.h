// Test helpers shared by the trainer tests: an MLP with SGD (momentum 0.9)
// or Adam behind a single-process Trainer, and small synthetic loaders.
#ifndef FRAMEWORM_TRAIN_TRAINER_TEST_RIG_H_
#define FRAMEWORM_TRAIN_TRAINER_TEST_RIG_H_

#include <cstdint>
#include <memory>

#include <torch/torch.h>

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

}  // namespace frameworm::testutil

#endif  // FRAMEWORM_TRAIN_TRAINER_TEST_RIG_H_
