#include "train/objective.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace frameworm {
namespace {

namespace F = torch::nn::functional;

// Elementwise losses broadcast silently when shapes differ (a [N] target
// against [N, 1] outputs trains on an N x N matrix): refuse instead.
void SameShape(const char* what, const torch::Tensor& out, const torch::Tensor& y) {
  TORCH_CHECK(out.sizes() == y.sizes(), what, ": the model's output has shape ", out.sizes(),
              " but the target has shape ", y.sizes(), "; they must be equal");
  TORCH_CHECK(y.is_floating_point(), what, ": the target must be floating point, not ",
              y.scalar_type());
}

void ClassTargets(const char* what, const torch::Tensor& out, const torch::Tensor& y) {
  TORCH_CHECK(y.scalar_type() == torch::kLong, what,
              ": the target must hold class indices (int64), not ", y.scalar_type());
  TORCH_CHECK(out.dim() >= 2 && out.size(0) == y.size(0), what,
              ": the model's output must be [N, classes] for N targets; output ", out.sizes(),
              ", target ", y.sizes());
}

const char* const kLosses[] = {"cross_entropy", "nll", "mse", "l1", "smooth_l1",
                               "bce_with_logits"};
const char* const kMetrics[] = {"accuracy", "binary_accuracy", "mse", "mae"};

}  // namespace

LossFn CrossEntropyLoss() {
  return [](const torch::Tensor& out, const torch::Tensor& y) {
    ClassTargets("cross_entropy", out, y);
    return F::cross_entropy(out, y);
  };
}

std::vector<NamedMetric> ClassifierMetrics() { return {{"accuracy", *MakeMetric("accuracy")}}; }

absl::StatusOr<LossFn> MakeLoss(const std::string& name) {
  if (name == "cross_entropy") return CrossEntropyLoss();
  if (name == "nll") {
    return LossFn([](const torch::Tensor& out, const torch::Tensor& y) {
      ClassTargets("nll", out, y);
      return F::nll_loss(out, y);
    });
  }
  // Elementwise losses over an output and a target of the same shape.
  auto elementwise = [](const char* loss, torch::Tensor (*fn)(const torch::Tensor&,
                                                               const torch::Tensor&)) {
    return LossFn([loss, fn](const torch::Tensor& out, const torch::Tensor& y) {
      SameShape(loss, out, y);
      return fn(out, y);
    });
  };
  if (name == "mse") {
    return elementwise("mse", [](const torch::Tensor& o, const torch::Tensor& y) {
      return F::mse_loss(o, y);
    });
  }
  if (name == "l1") {
    return elementwise("l1", [](const torch::Tensor& o, const torch::Tensor& y) {
      return F::l1_loss(o, y);
    });
  }
  if (name == "smooth_l1") {
    return elementwise("smooth_l1", [](const torch::Tensor& o, const torch::Tensor& y) {
      return F::smooth_l1_loss(o, y);
    });
  }
  if (name == "bce_with_logits") {
    return elementwise("bce_with_logits", [](const torch::Tensor& o, const torch::Tensor& y) {
      return F::binary_cross_entropy_with_logits(o, y);
    });
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown loss '", name, "'; known: ",
                                                 absl::StrJoin(kLosses, ", ")));
}

absl::StatusOr<MetricFn> MakeMetric(const std::string& name) {
  // Per-sample means over dim 0; the trainer weights them by batch size.
  auto per_sample_mean = [](const torch::Tensor& v) { return v.to(torch::kFloat).mean(); };
  if (name == "accuracy") {
    return MetricFn([per_sample_mean](const torch::Tensor& out, const torch::Tensor& y) {
      ClassTargets("accuracy", out, y);
      return per_sample_mean(out.argmax(1).eq(y));
    });
  }
  if (name == "binary_accuracy") {
    return MetricFn([per_sample_mean](const torch::Tensor& out, const torch::Tensor& y) {
      SameShape("binary_accuracy", out, y);
      return per_sample_mean(out.gt(0).eq(y.gt(0.5)));
    });
  }
  if (name == "mse") {
    return MetricFn([](const torch::Tensor& out, const torch::Tensor& y) {
      SameShape("mse", out, y);
      return (out.detach() - y).pow(2).to(torch::kFloat).mean();
    });
  }
  if (name == "mae") {
    return MetricFn([](const torch::Tensor& out, const torch::Tensor& y) {
      SameShape("mae", out, y);
      return (out.detach() - y).abs().to(torch::kFloat).mean();
    });
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown metric '", name, "'; known: ",
                                                 absl::StrJoin(kMetrics, ", ")));
}

std::vector<std::string> DefaultMetrics(const std::string& loss) {
  if (loss == "cross_entropy" || loss == "nll") return {"accuracy"};
  if (loss == "mse" || loss == "l1" || loss == "smooth_l1") return {"mae"};
  if (loss == "bce_with_logits") return {"binary_accuracy"};
  return {};
}

absl::StatusOr<std::vector<NamedMetric>> MakeMetrics(const std::string& names) {
  std::vector<NamedMetric> out;
  if (names.empty() || names == "none") return out;
  std::set<std::string> seen;
  for (absl::string_view n : absl::StrSplit(names, ',')) {
    const std::string name(n);
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("metric '", name, "' is listed twice"));
    }
    absl::StatusOr<MetricFn> m = MakeMetric(name);
    if (!m.ok()) return m.status();
    out.emplace_back(name, std::move(*m));
  }
  return out;
}

}  // namespace frameworm
