// Built-in models, constructed in the same order as their PyTorch
// counterparts so torch::manual_seed(s) yields the same initial weights.
//   cnn: Conv2d(1,32,3,p=1) ReLU MaxPool2d(2) Conv2d(32,64,3,p=1) ReLU
//        MaxPool2d(2) Flatten Linear(3136,128) ReLU Linear(128,10)
//   mlp: Flatten Linear(784,256) ReLU Linear(256,128) ReLU Linear(128,10)
#ifndef FRAMEWORM_TRAIN_MODELS_H_
#define FRAMEWORM_TRAIN_MODELS_H_

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace frameworm {

torch::nn::Sequential MakeCnn();
torch::nn::Sequential MakeMlp();
// Errors: INVALID_ARGUMENT for a name other than "cnn" or "mlp".
absl::StatusOr<torch::nn::Sequential> MakeModel(const std::string& name);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_MODELS_H_
