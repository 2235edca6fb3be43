// What one frameworm-train run trains, built from its checked flags: the
// model (built-in or TorchScript), the training and validation data
// (Fashion-MNIST, synthetic or a tensor file), the optimizer and the
// objective (loss, metrics, how a batch reaches the model's forward).
//
// Thread safety: BuildRunSetup is called once, from the training thread.
#ifndef FRAMEWORM_TRAINER_RUN_SETUP_H_
#define FRAMEWORM_TRAINER_RUN_SETUP_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "train/data.h"
#include "train/objective.h"
#include "train/script_model.h"
#include "train/trainer.h"
#include "trainer/run.h"

namespace frameworm {

struct RunSetup {
  std::optional<Model> model;
  ScriptModel script{nullptr};  // set for a TorchScript model
  Dataset train, val;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  LossFn loss;
  std::vector<NamedMetric> metrics;
  std::function<torch::Tensor(Model&, const Batch&)> forward;  // null: forward(x)
};

// Seeds torch with config.seed before the model is built (built-in models'
// initial weights). Errors (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED)
// name the flag or file at fault: an unreadable model or data file, an
// --inputs name the data file lacks or the model's forward cannot take, an
// unknown loss or metric, a data file whose validation split is impossible,
// a --synthetic-size larger than this machine's memory or that cannot be
// allocated (RESOURCE_EXHAUSTED).
absl::StatusOr<RunSetup> BuildRunSetup(const TrainConfig& config);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_RUN_SETUP_H_
