#include "jobspec/train_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/flags/marshalling.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/closest_match.h"
#include "common/printable.h"

namespace frameworm {

const std::vector<TrainFlag>& TrainFlags() {
  using K = TrainFlagKind;
  // A factor of the optimizer or its schedule: a number the float
  // arithmetic of a step can hold (1e300 would pass and fail at step 1).
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  // Processes of --nprocs and threads of --threads: torch starts them all
  // at once (1,024 threads take about 9 s on a 2-core machine; 100,000
  // never finished). train/launch.h's kMaxLaunchProcesses is the same.
  constexpr double kMaxProcsOrThreads = 1024;
  // An integer the trainer keeps in an int (--grad-accum becomes
  // TrainerOptions::gradient_accumulation_steps): past this it would wrap.
  constexpr double kIntMax = std::numeric_limits<int>::max();
  // Step counts: the coordinator refuses step reports past 2^48 steps
  // (coordinator/job_scheduler.cc CheckStepReport), so --max-steps stops
  // there. --epochs and --batch-size far past any real run: the trainer's
  // planned steps (epochs x batches per epoch, trainer/run.cc and
  // train/trainer.cc) stay far inside int64 for any data set that fits a
  // machine, an epoch number fits the int a step report carries, and a
  // batch count (samples + batch size - 1) / batch size cannot overflow.
  constexpr double kMaxSteps = static_cast<double>(int64_t{1} << 48);
  constexpr double kMaxEpochs = 1'000'000;
  constexpr double kMaxBatchSize = 1 << 24;
  static const auto* flags = [] {
    auto* v = new std::vector<TrainFlag>{
        {.name = "async-checkpoint", .kind = K::kBool},
        {.name = "autocast", .kind = K::kString, .choices = {"off", "bf16"}},
        // c10d's mpi too, but no build has it (LibTorch from the PyPI wheel
        // is built without MPI): refused here, before anything starts.
        {.name = "backend", .kind = K::kString, .choices = {"", "gloo", "nccl"}},
        {.name = "batch-size", .kind = K::kInt64, .min = 1, .max = kMaxBatchSize},
        {.name = "checkpoint-dir", .kind = K::kString},
        {.name = "checkpoint-every", .kind = K::kInt64, .min = 0},
        {.name = "clip-grad-norm", .kind = K::kDouble, .min = 0},
        {.name = "connect-timeout", .kind = K::kInt64, .min = 1},
        {.name = "data", .kind = K::kString, .path = true},
        {.name = "data-dir", .kind = K::kString, .path = true},
        {.name = "dataset", .kind = K::kString, .choices = {"fashion-mnist", "synthetic"}},
        {.name = "device", .kind = K::kString, .choices = {"auto", "cpu", "cuda"}},
        {.name = "early-stopping-patience", .kind = K::kInt64, .min = 0},
        {.name = "epochs", .kind = K::kInt64, .min = 1, .max = kMaxEpochs},
        {.name = "eval-every", .kind = K::kInt64, .min = 0},
        {.name = "export-path", .kind = K::kString, .path = true},
        {.name = "find-unused-parameters", .kind = K::kBool},
        {.name = "flight-recorder", .kind = K::kInt64, .min = 0, .max = 1 << 20},
        {.name = "grad-accum", .kind = K::kInt64, .min = 1, .max = kIntMax},
        {.name = "inputs", .kind = K::kString, .name_list = true},
        {.name = "keep-best", .kind = K::kBool},
        {.name = "log-every", .kind = K::kInt64, .min = 0},
        {.name = "loss", .kind = K::kString,
         .choices = {"cross_entropy", "nll", "mse", "l1", "smooth_l1", "bce_with_logits"}},
        {.name = "lr", .kind = K::kDouble, .min = 0, .max = kFloatMax, .min_open = true},
        {.name = "lr-gamma", .kind = K::kDouble, .min = 0, .max = kFloatMax},
        {.name = "lr-schedule", .kind = K::kString, .choices = {"constant", "step", "cosine", "linear"}},
        {.name = "lr-step-size", .kind = K::kInt64},
        {.name = "max-steps", .kind = K::kInt64, .min = 0, .max = kMaxSteps},
        {.name = "memory-checkpoint-dir", .kind = K::kString},
        {.name = "memory-checkpoint-every", .kind = K::kString, .min = 0, .choices = {"auto"}, .integer_too = true},
        // trainer/run_setup.cc: auto is the loss's metrics, "" and none no
        // metric; else train/objective.cc MakeMetrics' list of the names
        // MakeMetric knows (its kMetrics, mirrored: jobspec does not link
        // the training library), each once.
        {.name = "metrics", .kind = K::kString, .choices = {"auto", "", "none"},
         .list_of = {"accuracy", "binary_accuracy", "mse", "mae"}},
        {.name = "min-lr", .kind = K::kDouble, .min = 0, .max = kFloatMax},
        {.name = "model", .kind = K::kString, .choices = {"cnn", "mlp"}, .path = true},
        {.name = "momentum", .kind = K::kDouble, .min = 0, .max = kFloatMax},
        {.name = "monitor", .kind = K::kString},
        {.name = "nprocs", .kind = K::kInt64, .min = 1, .max = kMaxProcsOrThreads},
        {.name = "optimizer", .kind = K::kString, .choices = {"sgd", "adam", "adamw"}},
        {.name = "resume", .kind = K::kString},
        {.name = "scale-lr", .kind = K::kBool},
        {.name = "seed", .kind = K::kUint64},
        {.name = "synthetic-size", .kind = K::kInt64, .min = 1},
        {.name = "threads", .kind = K::kInt64, .min = 1, .max = kMaxProcsOrThreads},
        {.name = "val-fraction", .kind = K::kDouble, .min = 0, .max = 1, .min_open = true, .max_open = true},
        {.name = "warmup-steps", .kind = K::kInt64, .min = 0},
        {.name = "weight-decay", .kind = K::kDouble, .min = 0, .max = kFloatMax},
    };
    std::sort(v->begin(), v->end(), [](const TrainFlag& a, const TrainFlag& b) {
      return std::string(a.name) < b.name;
    });
    return v;
  }();
  return *flags;
}

const char* TrainFlagKindName(TrainFlagKind kind) {
  switch (kind) {
    case TrainFlagKind::kString: return "a string";
    case TrainFlagKind::kBool: return "true or false";
    case TrainFlagKind::kInt64: return "an integer";
    case TrainFlagKind::kUint64: return "a non-negative integer";
    case TrainFlagKind::kDouble: return "a number";
  }
  return "a value";
}

namespace {

// absl's parse of a flag's value, as the trainer's parser does it.
template <typename T>
bool ParseAs(const std::string& value, T* out) {
  std::string error;
  return absl::ParseFlag(value, out, &error);
}

template <typename T>
bool Parses(const std::string& value) {
  T parsed;
  return ParseAs(value, &parsed);
}

bool ValueOfKind(TrainFlagKind kind, const std::string& value) {
  switch (kind) {
    case TrainFlagKind::kString: return true;
    case TrainFlagKind::kBool: return Parses<bool>(value);
    case TrainFlagKind::kInt64: return Parses<int64_t>(value);
    case TrainFlagKind::kUint64: return Parses<uint64_t>(value);
    case TrainFlagKind::kDouble: return Parses<double>(value);
  }
  return false;
}

// A range's end in words: whole numbers in full (1048576), others as %g.
std::string Bound(double v) {
  if (std::abs(v) < 1e15 && v == std::trunc(v)) {  // in int64's range before the cast
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrCat(v);
}

// "an integer >= 1", "a number > 0 and <= 3.40282e+38", "an integer
// between 1 and 1024": the flag's range in words.
std::string RangeText(const TrainFlag& f, const char* what) {
  const bool has_min = f.min > -std::numeric_limits<double>::infinity();
  const bool has_max = f.max < std::numeric_limits<double>::infinity();
  const char* lo = f.min_open ? " > " : " >= ";
  const char* hi = f.max_open ? " < " : " <= ";
  if (has_min && has_max && !f.min_open && !f.max_open) {
    return absl::StrCat(what, " between ", Bound(f.min), " and ", Bound(f.max));
  }
  if (has_min && has_max) return absl::StrCat(what, lo, Bound(f.min), " and", hi, Bound(f.max));
  if (has_min) return absl::StrCat(what, lo, Bound(f.min));
  if (has_max) return absl::StrCat(what, hi, Bound(f.max));
  return what;
}

bool IsChoice(const TrainFlag& f, const std::string& value) {
  return std::any_of(f.choices.begin(), f.choices.end(),
                     [&](const char* c) { return value == c; });
}

// `value` is a comma-separated list of names of f.list_of, none twice.
bool IsNameList(const TrainFlag& f, const std::string& value) {
  std::vector<absl::string_view> seen;
  for (absl::string_view name : absl::StrSplit(value, ',')) {
    const bool known = std::any_of(f.list_of.begin(), f.list_of.end(),
                                   [&](const char* c) { return name == c; });
    if (!known || std::find(seen.begin(), seen.end(), name) != seen.end()) return false;
    seen.push_back(name);
  }
  return true;
}

bool InRange(const TrainFlag& f, double v) {
  return (f.min_open ? v > f.min : v >= f.min) && (f.max_open ? v < f.max : v <= f.max);
}

// "auto, cpu or cuda" (an empty choice shown as "'' (empty)").
std::string ChoicesText(const TrainFlag& f) {
  std::vector<std::string> shown;
  for (const char* c : f.choices) shown.push_back(*c ? c : "'' (empty)");
  if (shown.size() == 1) return shown[0];
  return absl::StrCat(absl::StrJoin(shown.begin(), shown.end() - 1, ", "), " or ", shown.back());
}

// nullopt when `value` (already of the flag's kind) is one the trainer
// accepts; else what it must be, in words.
std::optional<std::string> WantedValue(const TrainFlag& f, const std::string& value) {
  switch (f.kind) {
    case TrainFlagKind::kBool:
    case TrainFlagKind::kUint64:
      return std::nullopt;
    case TrainFlagKind::kInt64: {
      int64_t v = 0;
      ParseAs(value, &v);
      if (InRange(f, static_cast<double>(v))) return std::nullopt;
      return RangeText(f, "an integer");
    }
    case TrainFlagKind::kDouble: {
      double v = 0;
      ParseAs(value, &v);
      if (InRange(f, v)) return std::nullopt;  // NaN is in no range
      return RangeText(f, "a number");
    }
    case TrainFlagKind::kString:
      break;
  }
  if (f.name_list) {
    for (absl::string_view name : absl::StrSplit(value, ',')) {
      if (name.empty()) return "comma-separated names, none empty";
    }
    return std::nullopt;
  }
  // Any other value of a path flag is a path, the trainer's to check;
  // but not an empty one where choices name what else it takes (--model).
  if (f.path && (f.choices.empty() || !value.empty())) return std::nullopt;
  if (f.choices.empty() || IsChoice(f, value)) return std::nullopt;
  if (f.path) return absl::StrCat(absl::StrJoin(f.choices, ", "), " or a path");
  if (!f.list_of.empty() && IsNameList(f, value)) return std::nullopt;
  if (!f.list_of.empty()) {
    std::vector<std::string> choices;
    for (const char* c : f.choices) choices.push_back(*c ? c : "'' (empty)");
    return absl::StrCat(absl::StrJoin(choices, ", "), " or a comma-separated list of ",
                        absl::StrJoin(f.list_of, ", "), " (each at most once)");
  }
  if (f.integer_too) {
    int64_t v = 0;
    if (ParseAs(value, &v) && InRange(f, static_cast<double>(v))) return std::nullopt;
    return absl::StrCat(ChoicesText(f), " or ", RangeText(f, "an integer"));
  }
  return ChoicesText(f);
}

// The metrics a run computes (names of a valid --metrics): its list, or
// for auto the loss's usual ones (train/objective.cc DefaultMetrics,
// mirrored: jobspec does not link the training library).
std::vector<std::string> RunMetrics(const std::string& metrics, const std::string& loss) {
  if (metrics == "auto") {
    if (loss == "cross_entropy" || loss == "nll") return {"accuracy"};
    if (loss == "mse" || loss == "l1" || loss == "smooth_l1") return {"mae"};
    if (loss == "bce_with_logits") return {"binary_accuracy"};
    return {};
  }
  if (metrics.empty() || metrics == "none") return {};
  return absl::StrSplit(metrics, ',');
}

}  // namespace

const TrainFlag* FindTrainFlag(const std::string& name) {
  for (const TrainFlag& f : TrainFlags()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

bool IsTrainPathValue(const TrainFlag& f, const std::string& value) {
  return f.path && !value.empty() && !IsChoice(f, value);
}

absl::StatusOr<std::vector<TrainArg>> SplitTrainArgs(const std::vector<std::string>& args) {
  std::vector<TrainArg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h" || a == "--version") {
      return absl::InvalidArgumentError(
          absl::StrCat("'", a, "' makes frameworm-train print and exit instead of training"));
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", ShownValue(a), "' is not a --flag (frameworm-train takes no other arguments)"));
    }
    std::string name = a.substr(2);
    std::string value;
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    std::replace(name.begin(), name.end(), '_', '-');
    const TrainFlag* f = FindTrainFlag(name);
    if (f == nullptr && !has_value && name.rfind("no", 0) == 0) {
      const TrainFlag* b = FindTrainFlag(name.substr(2));
      if (b != nullptr && b->kind == TrainFlagKind::kBool) {
        out.push_back({b->name, "false"});
        continue;
      }
    }
    if (f == nullptr) {  // the trainer's parser stops at it: so does this
      out.push_back({std::move(name), std::move(value)});
      return out;
    }
    if (!has_value) {
      if (f->kind == TrainFlagKind::kBool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("'--", ShownValue(name), "' needs a value"));
      }
    }
    out.push_back({std::move(name), std::move(value)});
  }
  return out;
}

std::optional<std::string> CheckTrainOption(const std::string& name,
                                            const std::string& value) {
  const TrainFlag* it = FindTrainFlag(name);
  if (it == nullptr) {
    std::vector<std::string> names;
    for (const auto& f : TrainFlags()) names.push_back(f.name);
    const std::string best = ClosestMatch(name, names);
    return absl::StrCat("is not a frameworm-train flag",
                        best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)"));
  }
  if (!ValueOfKind(it->kind, value)) {
    return absl::StrCat("must be ", TrainFlagKindName(it->kind), ", got '", ShownValue(value), "'");
  }
  if (auto wanted = WantedValue(*it, value)) {
    return absl::StrCat("must be ", *wanted, ", got '", ShownValue(value), "'");
  }
  return std::nullopt;
}

std::optional<TrainOptionSetProblem> CheckTrainOptionSet(
    const std::map<std::string, std::string>& options) {
  auto value = [&](const char* name, const char* default_value) {
    auto it = options.find(name);
    return it == options.end() ? std::string(default_value) : it->second;
  };
  // The monitored metric: loss or one the run computes, with or without
  // "val_" (train/trainer.cc Trainer::CheckOptions and MonitoredMetric; the
  // metrics as trainer/run_setup.cc makes them).
  if (const std::string monitor = value("monitor", ""); !monitor.empty()) {
    std::vector<std::string> have = {"loss"};
    for (std::string& m : RunMetrics(value("metrics", "auto"), value("loss", "cross_entropy"))) {
      have.push_back(std::move(m));
    }
    auto known = [&](absl::string_view name) {
      return std::find(have.begin(), have.end(), name) != have.end();
    };
    if (!known(monitor) && !(absl::StartsWith(monitor, "val_") && known(monitor.substr(4)))) {
      return TrainOptionSetProblem{
          {"monitor", "metrics", "loss"},
          absl::StrCat("--monitor must name a validation metric, got '", ShownValue(monitor),
                       "'; there are: ", absl::StrJoin(have, ", "),
                       " (val_loss and val_<metric> mean the same)")};
    }
  }
  if (value("lr-schedule", "constant") == "step") {
    int64_t step_size = 0;
    const std::string given = value("lr-step-size", "0");
    if (!ParseAs(given, &step_size) || step_size < 1) {
      return TrainOptionSetProblem{
          {"lr-schedule", "lr-step-size"},
          absl::StrCat("--lr-schedule=step needs --lr-step-size >= 1, got ", ShownValue(given))};
    }
  }
  return std::nullopt;
}

}  // namespace frameworm
