#include "train/models.h"

#include "absl/strings/str_cat.h"

namespace frameworm {

namespace nn = torch::nn;

// Modules are created one statement at a time: the order of evaluation of
// function arguments is unspecified (GCC goes right to left), and the order
// of creation decides which random numbers each layer's init draws.
torch::nn::Sequential MakeCnn() {
  nn::Sequential s;
  s->push_back(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)));
  s->push_back(nn::ReLU());
  s->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2)));
  s->push_back(nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
  s->push_back(nn::ReLU());
  s->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2)));
  s->push_back(nn::Flatten());
  s->push_back(nn::Linear(3136, 128));
  s->push_back(nn::ReLU());
  s->push_back(nn::Linear(128, 10));
  return s;
}

torch::nn::Sequential MakeMlp() {
  nn::Sequential s;
  s->push_back(nn::Flatten());
  s->push_back(nn::Linear(784, 256));
  s->push_back(nn::ReLU());
  s->push_back(nn::Linear(256, 128));
  s->push_back(nn::ReLU());
  s->push_back(nn::Linear(128, 10));
  return s;
}

absl::StatusOr<torch::nn::Sequential> MakeModel(const std::string& name) {
  if (name == "cnn") return MakeCnn();
  if (name == "mlp") return MakeMlp();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model \"", name, "\" (expected cnn or mlp)"));
}

}  // namespace frameworm
