#include "jobspec/train_flags.h"

#include <algorithm>
#include <cstdint>

#include "absl/flags/marshalling.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/closest_match.h"
#include "common/printable.h"

namespace frameworm {

const std::vector<TrainFlag>& TrainFlags() {
  using K = TrainFlagKind;
  static const auto* flags = [] {
    auto* v = new std::vector<TrainFlag>{
        {"async-checkpoint", K::kBool},       {"autocast", K::kString},
        {"backend", K::kString},              {"batch-size", K::kInt64},
        {"checkpoint-dir", K::kString},       {"checkpoint-every", K::kInt64},
        {"clip-grad-norm", K::kDouble},       {"connect-timeout", K::kInt64},
        {"data", K::kString},                 {"data-dir", K::kString},
        {"dataset", K::kString},              {"device", K::kString},
        {"early-stopping-patience", K::kInt64}, {"epochs", K::kInt64},
        {"eval-every", K::kInt64},            {"export-path", K::kString},
        {"find-unused-parameters", K::kBool}, {"flight-recorder", K::kInt64},
        {"grad-accum", K::kInt64},            {"inputs", K::kString},
        {"keep-best", K::kBool},              {"log-every", K::kInt64},
        {"loss", K::kString},                 {"lr", K::kDouble},
        {"lr-gamma", K::kDouble},             {"lr-schedule", K::kString},
        {"lr-step-size", K::kInt64},          {"max-steps", K::kInt64},
        {"memory-checkpoint-dir", K::kString}, {"memory-checkpoint-every", K::kString},
        {"metrics", K::kString},              {"min-lr", K::kDouble},
        {"model", K::kString},                {"momentum", K::kDouble},
        {"monitor", K::kString},              {"nprocs", K::kInt64},
        {"optimizer", K::kString},            {"resume", K::kString},
        {"scale-lr", K::kBool},               {"seed", K::kUint64},
        {"synthetic-size", K::kInt64},        {"threads", K::kInt64},
        {"val-fraction", K::kDouble},         {"warmup-steps", K::kInt64},
        {"weight-decay", K::kDouble},
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

template <typename T>
bool Parses(const std::string& value) {
  T parsed;
  std::string error;
  return absl::ParseFlag(value, &parsed, &error);
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

const TrainFlag* FindTrainFlag(const std::string& name) {
  for (const TrainFlag& f : TrainFlags()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace

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
  return std::nullopt;
}

}  // namespace frameworm
