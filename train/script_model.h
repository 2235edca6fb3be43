// Models written in Python: a TorchScript module saved with
// torch.jit.script(model).save(path) (or torch.jit.trace), trained in C++
// like any other Model.
//
//   absl::StatusOr<ScriptModel> m = LoadScriptModel("model.pt");
//   Trainer t(*m, optimizer_over((*m)->parameters()), torch::kCPU);
//   ...
//   (*m)->Save("trained.pt");  // torch.jit.load("trained.pt") in Python
//
// The script module's parameters and buffers are registered in a mirror of
// its submodule tree, under the same names as the Python module's
// state_dict ("fc1.weight"), sharing their tensors: the optimizer, DDP,
// checkpoints and .to(device) act on the script module's own weights.
// train()/eval() switch the script module's mode too (dropout, batch norm).
// The script runs with the graph executor's optimizations off, so autograd
// is the same as eager PyTorch's (loss curves equal the Python model's).
//
// Thread safety: as torch::nn::Module (one training thread).
#ifndef FRAMEWORM_TRAIN_SCRIPT_MODEL_H_
#define FRAMEWORM_TRAIN_SCRIPT_MODEL_H_

#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

class ScriptModelImpl : public torch::nn::Module {
 public:
  explicit ScriptModelImpl(torch::jit::Module module);
  // forward(x); the script's forward must return one tensor (c10::Error
  // naming what it returned otherwise).
  torch::Tensor forward(torch::Tensor x);
  // forward(inputs[0], inputs[1], ...), for a forward of several inputs.
  torch::Tensor forward_inputs(const std::vector<torch::Tensor>& inputs);
  void train(bool on = true) override;
  torch::jit::Module& script() { return module_; }
  // Writes the script module with its current weights (a temporary file
  // renamed over `path`). Errors: INTERNAL with LibTorch's message.
  absl::Status Save(const std::string& path);

 private:
  torch::jit::Module module_;
};
TORCH_MODULE(ScriptModel);

// Errors: NOT_FOUND (no such file), INVALID_ARGUMENT (not a TorchScript
// archive, or it has no forward method), each naming the file.
absl::StatusOr<ScriptModel> LoadScriptModel(const std::string& path);

// Number of positional inputs of the script's forward (not counting self).
int ForwardArity(ScriptModelImpl& model);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_SCRIPT_MODEL_H_
