#include "trainer/run_setup.h"

#include <unistd.h>

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "train/models.h"
#include "train/tensor_file.h"
#include "train/torch_error.h"

namespace frameworm {
namespace {

bool BuiltIn(const std::string& model) { return model == "cnn" || model == "mlp"; }

// The synthetic training set of `size` samples and its validation set: an
// error naming --synthetic-size, not an abort, when they cannot fit.
absl::Status MakeSynthetic(const TrainConfig& f, RunSetup& out) {
  const int64_t val_size = std::max<int64_t>(64, f.synthetic_size / 4);
  // 28x28 float images and int64 labels.
  const double bytes = (static_cast<double>(f.synthetic_size) + static_cast<double>(val_size)) *
                       (28 * 28 * sizeof(float) + sizeof(int64_t));
  const double have =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  const auto mb = [](double b) { return static_cast<int64_t>(b / (1 << 20)); };
  if (have > 0 && bytes > have) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "--synthetic-size ", f.synthetic_size, " needs ", mb(bytes),
        " MB for its samples (training and validation), more than this machine's ", mb(have),
        " MB of memory"));
  }
  try {
    out.train = MakeSyntheticDataset(f.synthetic_size, f.seed);
    out.val = MakeSyntheticDataset(val_size, f.seed + 1);
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("--synthetic-size ", f.synthetic_size,
                                                     ": cannot allocate its ", mb(bytes),
                                                     " MB of samples: ", TorchMessage(e)));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("--synthetic-size ", f.synthetic_size,
                                                     ": cannot allocate its ", mb(bytes),
                                                     " MB of samples"));
  }
  return absl::OkStatus();
}

absl::Status LoadData(const TrainConfig& f, RunSetup& out) {
  if (f.dataset == "fashion-mnist") {
    auto train = LoadFashionMnist(f.data_dir, "train");
    if (!train.ok()) return train.status();
    auto val = LoadFashionMnist(f.data_dir, "test");
    if (!val.ok()) return val.status();
    out.train = std::move(*train);
    out.val = std::move(*val);
    return absl::OkStatus();
  }
  if (f.dataset == "synthetic") return MakeSynthetic(f, out);
  auto file = DatasetFromTensorFile(f.data);
  if (!file.ok()) return file.status();
  if (file->val) {
    out.train = std::move(file->train);
    out.val = std::move(*file->val);
    return absl::OkStatus();
  }
  auto split = SplitDataset(file->train, f.val_fraction);
  if (!split.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data file ", f.data, " has no x_val/y_val and --val-fraction cannot split it: ",
        split.status().message()));
  }
  out.train = std::move(split->first);
  out.val = std::move(split->second);
  return absl::OkStatus();
}

// How a batch reaches the model: forward(x) or forward(<inputs>...).
absl::Status BindInputs(const TrainConfig& f, RunSetup& out) {
  const bool plain = f.inputs == std::vector<std::string>{"x"};
  if (!out.script) {
    if (!plain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--inputs applies to TorchScript models; the built-in ", f.model, " takes x only"));
    }
    return absl::OkStatus();
  }
  const int arity = ForwardArity(*out.script);
  if (static_cast<int>(f.inputs.size()) > arity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inputs names ", f.inputs.size(), " tensors (", absl::StrJoin(f.inputs, ","),
        ") but the model's forward takes ", arity));
  }
  for (const std::string& name : f.inputs) {
    if (name == "x") continue;
    if (name == "y") return absl::InvalidArgumentError("--inputs must not pass the target y");
    if (out.train.inputs.count(name) == 0) {
      std::vector<std::string> have = {"x"};
      for (const auto& [k, t] : out.train.inputs) have.push_back(k);
      return absl::InvalidArgumentError(absl::StrCat("--inputs names '", name,
                                                     "' but the data has only: ",
                                                     absl::StrJoin(have, ", ")));
    }
  }
  if (plain) return absl::OkStatus();
  out.forward = [script = out.script, names = f.inputs](Model&, const Batch& b) mutable {
    std::vector<torch::Tensor> in;
    in.reserve(names.size());
    for (const std::string& n : names) in.push_back(n == "x" ? b.data : b.inputs.at(n));
    return script->forward_inputs(in);
  };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunSetup> BuildRunSetup(const TrainConfig& f) {
  RunSetup out;
  if (absl::Status s = LoadData(f, out); !s.ok()) return s;
  torch::manual_seed(f.seed);
  if (BuiltIn(f.model)) {
    auto m = MakeModel(f.model);
    if (!m.ok()) return m.status();
    out.model.emplace(*m);
  } else {
    auto m = LoadScriptModel(f.model);
    if (!m.ok()) return m.status();
    out.script = *m;
    out.model.emplace(out.script);
  }
  if (absl::Status s = BindInputs(f, out); !s.ok()) return s;

  auto loss = MakeLoss(f.loss);
  if (!loss.ok()) return absl::InvalidArgumentError(absl::StrCat("--loss: ", loss.status().message()));
  out.loss = *loss;
  const std::string names =
      f.metrics == "auto" ? absl::StrJoin(DefaultMetrics(f.loss), ",") : f.metrics;
  auto metrics = MakeMetrics(names);
  if (!metrics.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics: ", metrics.status().message()));
  }
  out.metrics = std::move(*metrics);

  auto params = out.model->ptr()->parameters();
  if (f.optimizer == "adam") {
    out.optimizer = std::make_shared<torch::optim::Adam>(
        params, torch::optim::AdamOptions(f.lr).weight_decay(f.weight_decay));
  } else if (f.optimizer == "adamw") {
    out.optimizer = std::make_shared<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(f.lr).weight_decay(f.weight_decay));
  } else {
    out.optimizer = std::make_shared<torch::optim::SGD>(
        params, torch::optim::SGDOptions(f.lr).momentum(f.momentum).weight_decay(f.weight_decay));
  }
  return out;
}

}  // namespace frameworm
