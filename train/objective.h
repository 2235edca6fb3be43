// What a trainer minimizes and what it reports: a loss function and named
// metric functions over (model output, target).
//
//   TrainerOptions o;
//   o.loss = *MakeLoss("mse");
//   o.metrics = {{"mae", *MakeMetric("mae")}};
//   o.metrics.push_back({"within_0.1", [](const torch::Tensor& out, const torch::Tensor& y) {
//     return (out - y).abs().lt(0.1).to(torch::kFloat).mean();
//   }});
//
// A LossFn returns the batch's mean loss (a scalar tensor that backward()
// runs through). A MetricFn returns the batch's per-sample mean (a scalar
// tensor, no gradient needed); the trainer weights each batch's value by its
// sample count, so reported metrics are sample-weighted means over the
// epoch and, in a DistributedTrainer, over all ranks. A metric must
// therefore be an average of per-sample values (accuracy, squared error),
// not a ratio of sums (F1) or a root of a mean (RMSE: report "mse").
//
// Built-in losses (names as frameworm-train's --loss):
//   cross_entropy    logits [N, C] (or [N, C, ...]), class indices [N] int64
//   nll              log-probabilities [N, C], class indices [N] int64
//   mse, l1, smooth_l1  output and target of the same shape, floating point
//   bce_with_logits  logits and 0/1 targets of the same shape, floating point
// Built-in metrics: accuracy (argmax over dim 1 equals the class index),
//   binary_accuracy (logit > 0 equals target > 0.5), mse, mae.
// DefaultMetrics(loss): cross_entropy, nll -> accuracy; mse, l1, smooth_l1
//   -> mae; bce_with_logits -> binary_accuracy.
//
// A loss or metric given tensors of the wrong shape or type throws a
// c10::Error naming both shapes; the trainer turns it into its status.
//
// Thread safety: the functions are pure; call them from any thread.
#ifndef FRAMEWORM_TRAIN_OBJECTIVE_H_
#define FRAMEWORM_TRAIN_OBJECTIVE_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace frameworm {

using LossFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;
using MetricFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;
using NamedMetric = std::pair<std::string, MetricFn>;

// Errors: INVALID_ARGUMENT naming the unknown name and listing the known ones.
absl::StatusOr<LossFn> MakeLoss(const std::string& name);
absl::StatusOr<MetricFn> MakeMetric(const std::string& name);
// The built-in metrics for a built-in loss (empty for an unknown name).
std::vector<std::string> DefaultMetrics(const std::string& loss);
// MakeMetric for each of a comma-separated list ("" and "none": no metric).
// Errors: as MakeMetric; a name given twice.
absl::StatusOr<std::vector<NamedMetric>> MakeMetrics(const std::string& names);

// The defaults of TrainerOptions: cross-entropy and {"accuracy"}.
LossFn CrossEntropyLoss();
std::vector<NamedMetric> ClassifierMetrics();

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_OBJECTIVE_H_
