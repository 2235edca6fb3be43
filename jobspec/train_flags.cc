#include "jobspec/train_flags.h"

#include <algorithm>
#include <cstdint>

#include "absl/flags/marshalling.h"
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

// The value as a message shows it: printable, at most 80 bytes.
std::string Shown(const std::string& value) {
  return PrintableLine(value, 80) + (value.size() > 80 ? "..." : "");
}

}  // namespace

std::optional<std::string> CheckTrainOption(const std::string& name,
                                            const std::string& value) {
  const auto& flags = TrainFlags();
  auto it = std::find_if(flags.begin(), flags.end(),
                         [&](const TrainFlag& f) { return name == f.name; });
  if (it == flags.end()) {
    std::vector<std::string> names;
    for (const auto& f : flags) names.push_back(f.name);
    const std::string best = ClosestMatch(name, names);
    return absl::StrCat("is not a frameworm-train flag",
                        best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)"));
  }
  if (!ValueOfKind(it->kind, value)) {
    return absl::StrCat("must be ", TrainFlagKindName(it->kind), ", got '", Shown(value), "'");
  }
  return std::nullopt;
}

}  // namespace frameworm
