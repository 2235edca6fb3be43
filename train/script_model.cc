#include "train/script_model.h"

#include <unistd.h>

#include <filesystem>
#include <memory>

#include <torch/csrc/jit/runtime/graph_executor.h>

#include "absl/strings/str_cat.h"
#include "train/torch_error.h"

namespace frameworm {
namespace {

// Registers `m`'s own parameters and buffers in `into` (same tensors,
// same names) and mirrors its children below it.
void Mirror(const torch::jit::Module& m, torch::nn::Module& into);

class ScriptNode : public torch::nn::Module {
 public:
  explicit ScriptNode(const torch::jit::Module& m) { Mirror(m, *this); }
};

void Mirror(const torch::jit::Module& m, torch::nn::Module& into) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    into.register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    into.register_buffer(b.name, b.value);
  }
  for (const auto& c : m.named_children()) {
    into.register_module(c.name, std::make_shared<ScriptNode>(c.value));
  }
}

torch::Tensor OneTensor(const c10::IValue& out) {
  TORCH_CHECK(out.isTensor(), "the TorchScript model's forward must return one tensor; it returned ",
              out.tagKind());
  return out.toTensor();
}

}  // namespace

ScriptModelImpl::ScriptModelImpl(torch::jit::Module module) : module_(std::move(module)) {
  Mirror(module_, *this);
  train(module_.is_training());
}

torch::Tensor ScriptModelImpl::forward(torch::Tensor x) { return forward_inputs({std::move(x)}); }

torch::Tensor ScriptModelImpl::forward_inputs(const std::vector<torch::Tensor>& inputs) {
  // Unoptimized: plain autograd through the interpreter, as eager PyTorch.
  torch::jit::GraphOptimizerEnabledGuard plain(false);
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  return OneTensor(module_.forward(std::move(args)));
}

void ScriptModelImpl::train(bool on) {
  torch::nn::Module::train(on);
  module_.train(on);
}

absl::Status ScriptModelImpl::Save(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  try {
    std::error_code ec;
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    module_.save(tmp);
    fs::rename(tmp, path);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("saving the model to ", path, " failed: ", TorchMessage(e)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ScriptModel> LoadScriptModel(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "model file ", path,
        std::filesystem::exists(path, ec) ? " is not a regular file" : " does not exist"));
  }
  torch::jit::Module m;
  try {
    m = torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (const size_t nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", path,
        " is not a TorchScript model (save one with torch.jit.script(model).save(path)): ", why));
  }
  if (!m.find_method("forward")) {
    return absl::InvalidArgumentError(
        absl::StrCat("model file ", path, " has no forward method"));
  }
  return ScriptModel(std::make_shared<ScriptModelImpl>(std::move(m)));
}

int ForwardArity(ScriptModelImpl& model) {
  auto method = model.script().find_method("forward");
  if (!method) return 0;
  return static_cast<int>(method->function().getSchema().arguments().size()) - 1;
}

}  // namespace frameworm
