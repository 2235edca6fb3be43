// Implementation of jobspec/job_spec.h.
//
// Parsing walks the YAML tree once, refusing unknown keys and wrong types as
// it goes and remembering the line of every field it read; the filled proto
// then goes through the same value checks ValidateJobSpec applies, and an
// error there is reported at the line of the offending field.
#include "jobspec/job_spec.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/closest_match.h"
#include "common/printable.h"
#include "common/rank_env.h"
#include "jobspec/train_flags.h"
#include "yaml-cpp/yaml.h"

namespace frameworm {
namespace {

// A value error found on the proto, naming a field path such as
// "nodes.min" or "env.FOO".
struct FieldError {
  std::string field;
  std::string message;  // starts with the field name
};

constexpr int kMaxNodes = 4096;
constexpr int kMaxProcPerNode = 1024;
// entrypoint elements, env and train entries; and each one's total bytes.
constexpr int kMaxListEntries = 1024;
constexpr size_t kMaxTotalBytes = 256 << 10;
// Bytes of strings the parser copies out of the YAML document, counting a
// scalar again each time an alias (*name) repeats it: the four 256 KiB
// fields above fit, an alias bomb (a large anchor referenced thousands of
// times) is refused before it is copied.
constexpr size_t kMaxExpandedBytes = 4 * kMaxTotalBytes + (64 << 10);
// Linux's MAX_ARG_STRLEN: the most bytes one argv or environment string may
// have, its NUL included (execve fails with E2BIG past it, on every rank).
constexpr size_t kMaxArgStrlen = 131072;

// The 1-based line of the first content of a second YAML document in
// `yaml`, if there is one. Documents are delimited by the markers "---"
// and "..." at the start of a line (YAML forbids them inside scalars); a
// "---" before any content starts the first document; blank lines,
// comments and directives are no content, so a trailing marker holds none.
std::optional<int> SecondDocumentLine(absl::string_view yaml) {
  int doc = 0, line_no = 0;
  bool started = false;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    ++line_no;
    const auto is_marker = [&](absl::string_view m) {
      return absl::StartsWith(line, m) &&
             (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    };
    absl::string_view rest = line;
    if (is_marker("---") || is_marker("...")) {
      if (started) ++doc;
      started = true;
      rest = line.substr(3);  // "--- {name: x}": content on the marker's line
    }
    rest = absl::StripAsciiWhitespace(rest);
    if (rest.empty() || rest.front() == '#' || (rest.data() == line.data() && rest.front() == '%')) {
      continue;
    }
    if (doc >= 1) return line_no;
    started = true;
  }
  return std::nullopt;
}

bool IsEnvName(const std::string& k) {
  if (k.empty() || !(absl::ascii_isalpha(k[0]) || k[0] == '_')) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '_';
  });
}

bool IsFlagName(const std::string& k) {
  if (k.empty() || !absl::ascii_isalnum(k[0])) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
  });
}

// What a job spec says instead of a frameworm-train flag the coordinator
// sets for each rank: null for any other flag. A job's own value would
// send checkpoints where the catalog does not look, start a second
// rendezvous inside a rank, or resume from a file the catalog never had.
const char* CoordinatorsTrainOption(const std::string& flag) {
  static const auto* kReserved = new std::map<std::string, const char*>{
      {"checkpoint-dir", "use checkpoint.dir"},
      {"checkpoint-every", "use checkpoint.every_n_steps"},
      {"memory-checkpoint-dir", "in-memory checkpoints live under the coordinator's "
                                "--memory-checkpoint-root"},
      {"memory-checkpoint-every", "use checkpoint.memory_every_n_steps"},
      {"backend", "use backend"},
      {"nprocs", "use nproc_per_node"},
      {"resume", "each generation resumes from the newest checkpoint the coordinator holds"},
  };
  auto it = kReserved->find(flag);
  return it == kReserved->end() ? nullptr : it->second;
}

// What is wrong with a frameworm-train flag a job sets (a train: option
// or an entrypoint argument of the built-in trainer), without the flag's
// name; nullopt when nothing is.
std::optional<std::string> TrainFlagProblem(const std::string& name, const std::string& value) {
  if (!IsFlagName(name)) return "is not a flag name (lowercase letters, digits and '-')";
  if (const char* instead = CoordinatorsTrainOption(name)) {
    return absl::StrCat("is the coordinator's to set: ", instead);
  }
  // A job's trainer runs in its worker's directory, not the submitter's: a
  // relative path would name a file there, or none. (An empty value of a
  // path flag with choices, such as --model, is neither.)
  const TrainFlag* f = FindTrainFlag(name);
  const bool empty_for_choices = f != nullptr && f->path && !f->choices.empty() && value.empty();
  if (!empty_for_choices) {
    if (auto problem = CheckTrainOption(name, value)) return problem;
  }
  const bool relative = f != nullptr && IsTrainPathValue(*f, value) && value.front() != '/';
  if (empty_for_choices || relative) {
    std::string choices;
    for (const char* c : f->choices) absl::StrAppend(&choices, c, ", ");
    return absl::StrCat("must be ", choices, "an absolute path (a job's trainer runs in its "
                        "worker's directory), got '", ShownValue(value), "'");
  }
  return std::nullopt;
}

// " (did you mean 'x'?)" for the closest candidate, else "".
std::string Suggest(const std::string& got,
                    const std::vector<std::string>& candidates) {
  std::string best = ClosestMatch(got, candidates);
  return best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)");
}

std::optional<FieldError> CheckSpec(const v1::JobSpec& s) {
  auto err = [](std::string field, std::string msg) {
    return std::optional<FieldError>(FieldError{std::move(field), std::move(msg)});
  };
  if (s.name().empty()) return err("name", "name is required");
  // Every string must be UTF-8 (proto3's rule): a message holding one that
  // is not is refused unparsed by the coordinator, with no word on why.
  if (!IsValidUtf8(s.name())) return err("name", "name is not valid UTF-8");
  for (int i = 0; i < s.entrypoint_size(); ++i) {
    if (!IsValidUtf8(s.entrypoint(i))) {
      return err("entrypoint", absl::StrCat("entrypoint element ", i, " is not valid UTF-8"));
    }
  }
  for (const auto* map : {&s.env(), &s.secret_env(), &s.train_options()}) {
    const char* field = map == &s.env() ? "env" : map == &s.secret_env() ? "secret_env" : "train";
    const std::string key_what =
        map == &s.train_options() ? "train option name" : absl::StrCat(field, " name");
    for (const auto& [k, v] : *map) {
      if (!IsValidUtf8(k)) {
        return err(absl::StrCat(field, ".", k),
                   absl::StrCat(key_what, " '", ShownValue(k), "' is not valid UTF-8"));
      }
      if (!IsValidUtf8(v)) {  // the value unquoted: it may be a secret
        return err(absl::StrCat(field, ".", k),
                   absl::StrCat(field, ".", ShownValue(k), " is not valid UTF-8"));
      }
    }
  }
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"backend", &s.backend()},
        {"on_straggler", &s.on_straggler()},
        {"checkpoint.dir", &s.checkpoint().dir()}}) {
    if (!IsValidUtf8(*value)) return err(field, absl::StrCat(field, " is not valid UTF-8"));
  }
  if (s.name().size() > 128) {
    return err("name", absl::StrCat("name must be at most 128 characters, got ",
                                    s.name().size()));
  }
  // Names reach other users' terminals (frameworm-cli list, events).
  if (absl::StrContains(s.name(), '/') || HasControlCharacter(s.name())) {
    return err("name", "name must not contain '/' or control characters (newline, tab, escape, NUL)");
  }
  // Sizes: what a job carries to every worker and trainer is bounded.
  if (s.entrypoint_size() > kMaxListEntries) {
    return err("entrypoint", absl::StrCat("entrypoint has ", s.entrypoint_size(),
                                          " elements; at most ", kMaxListEntries));
  }
  size_t total = 0;
  for (int i = 0; i < s.entrypoint_size(); ++i) {
    if (i == 0 && s.entrypoint(0).empty()) {
      return err("entrypoint", "entrypoint's program (first element) is empty");
    }
    if (s.entrypoint(i).find('\0') != std::string::npos) {
      return err("entrypoint", absl::StrCat("entrypoint element ", i, " contains NUL"));
    }
    total += s.entrypoint(i).size();
  }
  if (total > kMaxTotalBytes) {
    return err("entrypoint", absl::StrCat("entrypoint is ", total, " bytes; at most ",
                                          kMaxTotalBytes));
  }
  // Each argument is one string of the trainer's argv (its NUL counted).
  for (int i = 0; i < s.entrypoint_size(); ++i) {
    if (s.entrypoint(i).size() + 1 > kMaxArgStrlen) {
      return err("entrypoint",
                 absl::StrCat("entrypoint element ", i, " is ", s.entrypoint(i).size(),
                              " bytes; at most ", kMaxArgStrlen - 1,
                              " (Linux's limit on one argument, MAX_ARG_STRLEN)"));
    }
  }
  for (const auto* map : {&s.env(), &s.secret_env(), &s.train_options()}) {
    const char* field = map == &s.env() ? "env" : map == &s.secret_env() ? "secret_env" : "train";
    if (map->size() > static_cast<size_t>(kMaxListEntries)) {
      return err(field, absl::StrCat(field, " has ", map->size(), " entries; at most ",
                                     kMaxListEntries));
    }
    total = 0;
    for (const auto& [k, v] : *map) {
      if (v.find('\0') != std::string::npos) {
        return err(absl::StrCat(field, ".", ShownValue(k)),
                   absl::StrCat(field, ".", ShownValue(k), " contains NUL"));
      }
      total += k.size() + v.size();
    }
    if (total > kMaxTotalBytes) {
      return err(field, absl::StrCat(field, " is ", total, " bytes; at most ", kMaxTotalBytes));
    }
    // Each entry is one string of every rank's environment (NAME=value) or
    // argv (--name=value, coordinator/generation_plan.cc TaskArgv), its NUL
    // counted.
    const bool is_train = map == &s.train_options();
    for (const auto& [k, v] : *map) {
      const size_t bytes = (is_train ? 3 : 1) + k.size() + v.size();
      if (bytes + 1 > kMaxArgStrlen) {
        return err(absl::StrCat(field, ".", k),
                   absl::StrCat(field, ".", ShownValue(k), " is ", bytes, " bytes as ",
                                is_train ? "--name=value" : "NAME=value", "; at most ",
                                kMaxArgStrlen - 1, " (Linux's limit on one ",
                                is_train ? "argument" : "environment string",
                                ", MAX_ARG_STRLEN)"));
      }
    }
  }
  if (const std::string& dir = s.checkpoint().dir(); !dir.empty()) {
    // The coordinator's rule (coordinator/checkpoint_paths.cc
    // IsCleanAbsolutePath), so that --dry-run agrees with a submit:
    // absolute, at most 4096 bytes, no NUL or other control character, no
    // component "." or "..", and none empty but a single trailing '/'
    // ("/srv/ckpt/").
    if (dir.front() != '/') {
      return err("checkpoint.dir",
                 absl::StrCat("checkpoint.dir must be an absolute path, got '", ShownValue(dir), "'"));
    }
    if (dir.size() > 4096) {
      return err("checkpoint.dir",
                 absl::StrCat("checkpoint.dir is ", dir.size(), " bytes; at most 4096"));
    }
    if (dir.find('\0') != std::string::npos) {
      return err("checkpoint.dir", "checkpoint.dir contains NUL");
    }
    // It is shown in other users' terminals (frameworm-cli checkpoints).
    if (HasControlCharacter(dir)) {
      return err("checkpoint.dir",
                 absl::StrCat("checkpoint.dir must not contain control characters (newline, tab, "
                              "escape), got '", ShownValue(dir), "'"));
    }
    for (absl::string_view part : absl::StrSplit(dir, '/')) {
      if (part == "." || part == "..") {
        return err("checkpoint.dir",
                   absl::StrCat("checkpoint.dir must not contain '.' or '..', got '", ShownValue(dir), "'"));
      }
    }
    // An empty component: "//" anywhere, but "//" alone is "/".
    if (dir != "//" && absl::StrContains(dir, "//")) {
      return err("checkpoint.dir",
                 absl::StrCat("checkpoint.dir must not contain '//', got '", ShownValue(dir), "'"));
    }
  }
  if (!UsesBuiltInTrainer(s) && !s.train_options().empty()) {
    return err("train",
               absl::StrCat("train options apply only to the built-in "
                            "frameworm-train, but entrypoint is '",
                            ShownValue(s.entrypoint(0)), "'"));
  }
  for (const auto& [k, v] : s.train_options()) {
    if (auto problem = TrainFlagProblem(k, v)) {
      return err("train." + k, absl::StrCat("train option '", ShownValue(k), "' ", *problem));
    }
  }
  // The built-in trainer's flags given in the entrypoint follow the same
  // rules as train: options.
  std::vector<TrainArg> args;
  if (UsesBuiltInTrainer(s) && s.entrypoint_size() > 1) {
    auto split = SplitTrainArgs({s.entrypoint().begin() + 1, s.entrypoint().end()});
    if (!split.ok()) {
      return err("entrypoint", absl::StrCat("entrypoint argument ", split.status().message()));
    }
    args = *std::move(split);
    for (const TrainArg& a : args) {
      if (auto problem = TrainFlagProblem(a.name, a.value)) {
        return err("entrypoint", absl::StrCat("entrypoint argument '--", ShownValue(a.name), "' ",
                                              *problem));
      }
    }
  }
  // The rules that join flags, over what the trainer gets: train: options,
  // then the entrypoint's arguments after them (coordinator/generation_plan.cc
  // TaskArgv; the later of two wins). The error names the entrypoint when
  // it gave one of the flags, else the first of them in train:.
  if (UsesBuiltInTrainer(s)) {
    std::map<std::string, std::string> options(s.train_options().begin(),
                                               s.train_options().end());
    std::set<std::string> in_entrypoint;
    for (const TrainArg& a : args) {
      in_entrypoint.insert(a.name);
      options[a.name] = a.value;
    }
    if (auto problem = CheckTrainOptionSet(options)) {
      std::string field = "train";
      for (const std::string& f : problem->flags) {
        if (in_entrypoint.contains(f)) field = "entrypoint";
      }
      for (const std::string& f : problem->flags) {
        if (field == "train" && s.train_options().contains(f)) field = "train." + f;
      }
      return err(field, problem->message);
    }
  }
  if (s.nodes_min() < 1) {
    return err("nodes.min",
               absl::StrCat("nodes.min must be >= 1, got ", s.nodes_min()));
  }
  if (s.nodes_max() < s.nodes_min()) {
    return err("nodes.max",
               absl::StrCat("nodes.max (", s.nodes_max(),
                            ") must be >= nodes.min (", s.nodes_min(), ")"));
  }
  if (s.nodes_max() > kMaxNodes) {
    return err("nodes.max", absl::StrCat("nodes.max must be <= ", kMaxNodes,
                                         ", got ", s.nodes_max()));
  }
  if (s.nproc_per_node() < 1) {
    return err("nproc_per_node", absl::StrCat("nproc_per_node must be >= 1, got ",
                                              s.nproc_per_node()));
  }
  if (s.nproc_per_node() > kMaxProcPerNode) {
    return err("nproc_per_node",
               absl::StrCat("nproc_per_node must be <= ", kMaxProcPerNode,
                            ", got ", s.nproc_per_node()));
  }
  // MPI is c10d's third backend, but no build has it: LibTorch from the
  // PyPI wheel is built without MPI (train/process_group.cc refuses it on
  // every rank).
  if (s.backend() == "mpi") {
    return err("backend",
               "backend mpi is not available: Frameworm's LibTorch (the PyPI wheel's) is "
               "built without MPI; use gloo or nccl (or leave backend out: nccl with GPUs, "
               "else gloo)");
  }
  static const std::vector<std::string> kBackends = {"gloo", "nccl"};
  if (!s.backend().empty() &&
      std::find(kBackends.begin(), kBackends.end(), s.backend()) ==
          kBackends.end()) {
    return err("backend",
               absl::StrCat("backend must be gloo or nccl, got '",
                            ShownValue(s.backend()), "'", Suggest(s.backend(), kBackends)));
  }
  for (const auto* map : {&s.env(), &s.secret_env()}) {
    const std::string field = map == &s.env() ? "env" : "secret_env";
    for (const auto& [k, v] : *map) {
      if (!IsEnvName(k)) {
        return err(field + "." + k, absl::StrCat(field, " name '", ShownValue(k),
                                                 "' is not a valid variable name"));
      }
      if (IsReservedEnvName(k)) {
        return err(field + "." + k,
                   absl::StrCat(field, " variable '", k,
                                "' is set by Frameworm and cannot be overridden"));
      }
      if (map == &s.secret_env() && s.env().count(k)) {
        return err(field + "." + k,
                   absl::StrCat("'", k, "' is in both env and secret_env"));
      }
    }
  }
  if (s.max_restarts() < 0) {
    return err("max_restarts",
               absl::StrCat("max_restarts must be >= 0, got ", s.max_restarts()));
  }
  if (!std::isfinite(s.heartbeat_timeout_s()) || s.heartbeat_timeout_s() < 0 ||
      (s.heartbeat_timeout_s() > 0 && s.heartbeat_timeout_s() < kMinHeartbeatTimeoutS)) {
    return err("heartbeat_timeout",
               absl::StrCat("heartbeat_timeout must be 0 (the coordinator's default) or at least ",
                            kMinHeartbeatTimeoutS, " seconds (workers heartbeat every second), got ",
                            s.heartbeat_timeout_s()));
  }
  if (s.heartbeat_timeout_s() > kMaxHeartbeatTimeoutS) {
    return err("heartbeat_timeout",
               absl::StrCat("heartbeat_timeout must be at most ", kMaxHeartbeatTimeoutS,
                            " seconds (7 days: a worker cut off from the coordinator stops its "
                            "trainers after it), got ",
                            s.heartbeat_timeout_s()));
  }
  if (!s.on_straggler().empty() && s.on_straggler() != "warn" &&
      s.on_straggler() != "restart_without") {
    return err("on_straggler", absl::StrCat("on_straggler must be warn or restart_without, got '",
                                            ShownValue(s.on_straggler()), "'"));
  }
  if (!std::isfinite(s.straggler_grace_s()) || s.straggler_grace_s() < 0 ||
      s.straggler_grace_s() > 86400) {
    return err("straggler_grace",
               absl::StrCat("straggler_grace must be within 0..86400 seconds, got ",
                            s.straggler_grace_s()));
  }
  if (s.total_steps() < 0 || s.total_steps() > kMaxTotalSteps) {
    return err("total_steps", absl::StrCat("total_steps must be within 0..", kMaxTotalSteps,
                                           ", got ", s.total_steps()));
  }
  const v1::CheckpointPolicy& c = s.checkpoint();
  if (c.every_n_steps() < 0 || c.every_n_steps() > kMaxTotalSteps) {
    return err("checkpoint.every_n_steps",
               absl::StrCat("checkpoint.every_n_steps must be within 0..", kMaxTotalSteps,
                            ", got ", c.every_n_steps()));
  }
  if (!std::isfinite(c.every_n_minutes()) || c.every_n_minutes() < 0) {
    return err("checkpoint.every_n_minutes",
               absl::StrCat("checkpoint.every_n_minutes must be >= 0, got ",
                            c.every_n_minutes()));
  }
  if (c.keep_last() < 0) {
    return err("checkpoint.keep_last",
               absl::StrCat("checkpoint.keep_last must be >= 0, got ",
                            c.keep_last()));
  }
  if (c.has_memory_every_n_steps() &&
      (c.memory_every_n_steps() < 0 || c.memory_every_n_steps() > kMaxMemoryCheckpointEvery)) {
    return err("checkpoint.memory_every_n_steps",
               absl::StrCat("checkpoint.memory_every_n_steps must be within 0..",
                            kMaxMemoryCheckpointEvery, ", got ", c.memory_every_n_steps()));
  }
  if (c.has_replicas() && (c.replicas() < 0 || c.replicas() > kMaxCheckpointReplicas)) {
    return err("checkpoint.replicas",
               absl::StrCat("checkpoint.replicas must be within 0..", kMaxCheckpointReplicas,
                            ", got ", c.replicas()));
  }
  return std::nullopt;
}

// Thrown inside the parser only; converted to a Status at the boundary.
struct ParseError {
  int line;  // 1-based, 0: unknown
  std::string message;
};

class Parser {
 public:
  explicit Parser(v1::JobSpec* spec) : spec_(spec) {}

  void ParseTop(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      throw ParseError{1, "empty job spec (expected a mapping with at least 'name')"};
    }
    if (!root.IsMap()) {
      throw ParseError{Line(root), "a job spec must be a mapping of fields, got " +
                                       Kind(root)};
    }
    static const std::vector<std::string> kTop = {
        "name",           "entrypoint",        "train",    "nodes",
        "nproc_per_node", "backend",           "env",      "secret_env",
        "max_restarts",   "heartbeat_timeout", "priority", "total_steps",
        "checkpoint",     "on_straggler",      "straggler_grace"};
    for (const auto& [key, value] : Fields(root, "", kTop)) {
      Field(key, value);
    }
  }

  const std::map<std::string, int>& lines() const { return lines_; }

 private:
  static int Line(const YAML::Node& n) {
    YAML::Mark m = n.Mark();
    return m.line < 0 ? 0 : m.line + 1;
  }
  static std::string Kind(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Null: return "nothing";
      case YAML::NodeType::Scalar: {
        // Cut and escaped: the value may be a large (or aliased) scalar,
        // and may hold control characters or bytes that are not UTF-8.
        const std::string& t = n.Scalar();
        return t.size() <= 64 ? absl::StrCat("'", PrintableLine(t, 64), "'")
                              : absl::StrCat("'", PrintableLine(t, 64), "...' (", t.size(), " bytes)");
      }
      default: return "an undefined value";
    }
  }

  // The (key, value) pairs of a mapping, refusing unknown and duplicate keys
  // (when `known` is non-empty) and non-scalar keys. `prefix` is the path of
  // the mapping ("checkpoint."), for messages.
  std::vector<std::pair<std::string, YAML::Node>> Fields(
      const YAML::Node& map, const std::string& prefix,
      const std::vector<std::string>& known) {
    std::vector<std::pair<std::string, YAML::Node>> out;
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      // A copy: it-> yields a temporary, a reference to its member dangles.
      const YAML::Node k = it->first;
      if (!k.IsScalar()) {
        throw ParseError{Line(k), absl::StrCat("a field name under '", prefix,
                                               "' must be a plain string")};
      }
      std::string key = Text(k);
      std::string path = prefix + key;
      // Names quoted cut short and escaped: they are the user's text.
      if (!known.empty() &&
          std::find(known.begin(), known.end(), key) == known.end()) {
        throw ParseError{Line(k), absl::StrCat("unknown field '", ShownValue(path), "'",
                                               Suggest(key, known))};
      }
      if (!seen.insert(key).second) {
        throw ParseError{Line(k), absl::StrCat("duplicate field '", ShownValue(path), "'")};
      }
      lines_[path] = Line(k);
      out.emplace_back(key, it->second);
    }
    return out;
  }

  // A scalar's text, counted against kMaxExpandedBytes (every copy the
  // parser makes goes through here).
  const std::string& Text(const YAML::Node& v) {
    const std::string& t = v.Scalar();
    if (t.size() > kMaxExpandedBytes - expanded_) {
      throw ParseError{Line(v), absl::StrCat(
          "the job spec's strings come to more than ", kMaxExpandedBytes,
          " bytes (an alias such as *name counts its anchor's text each time it is used)")};
    }
    expanded_ += t.size();
    return t;
  }
  std::string Str(const YAML::Node& v, const std::string& field) {
    if (!v.IsScalar()) {
      throw ParseError{Line(v), absl::StrCat(field, " must be a string, got ",
                                             Kind(v))};
    }
    return Text(v);
  }
  static int64_t Int(const YAML::Node& v, const std::string& field) {
    int64_t x;
    if (!v.IsScalar() || !absl::SimpleAtoi(v.Scalar(), &x)) {
      // Digits that do not fit 64 bits are an integer out of range.
      const std::string t = v.IsScalar() ? v.Scalar() : "";
      const absl::string_view digits = absl::StripPrefix(absl::StripPrefix(t, "-"), "+");
      const bool is_integer = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      });
      throw ParseError{Line(v), is_integer ? absl::StrCat(field, " is out of range, got ", Kind(v))
                                           : absl::StrCat(field, " must be an integer, got ",
                                                          Kind(v))};
    }
    return x;
  }
  static int32_t Int32(const YAML::Node& v, const std::string& field) {
    int64_t x = Int(v, field);
    if (x < INT32_MIN || x > INT32_MAX) {
      throw ParseError{Line(v),
                       absl::StrCat(field, " is out of range, got ", x)};
    }
    return static_cast<int32_t>(x);
  }
  static double Number(const YAML::Node& v, const std::string& field) {
    double x;
    if (!v.IsScalar() || !absl::SimpleAtod(v.Scalar(), &x) || !std::isfinite(x)) {
      throw ParseError{Line(v), absl::StrCat(field, " must be a number, got ",
                                             Kind(v))};
    }
    return x;
  }
  // Seconds as a number ("30", "2.5") or a duration ("30s", "2m", "500ms").
  static double Seconds(const YAML::Node& v, const std::string& field) {
    double x;
    if (v.IsScalar() && absl::SimpleAtod(v.Scalar(), &x) && std::isfinite(x)) {
      return x;
    }
    absl::Duration d;
    if (v.IsScalar() && absl::ParseDuration(v.Scalar(), &d) &&
        d != absl::InfiniteDuration() && d != -absl::InfiniteDuration()) {
      return absl::ToDoubleSeconds(d);
    }
    throw ParseError{Line(v),
                     absl::StrCat(field,
                                  " must be seconds (a number, or a duration "
                                  "such as 30s, 2m), got ",
                                  Kind(v))};
  }
  static std::vector<std::string> SplitCommand(const std::string& s, int line) {
    std::vector<std::string> out;
    std::string cur;
    bool in_word = false;
    char quote = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (quote) {
        if (c == quote) {
          quote = 0;
        } else if (c == '\\' && quote == '"' && i + 1 < s.size()) {
          cur += s[++i];
        } else {
          cur += c;
        }
      } else if (c == '\'' || c == '"') {
        quote = c;
        in_word = true;
      } else if (c == '\\' && i + 1 < s.size()) {
        cur += s[++i];
        in_word = true;
      } else if (absl::ascii_isspace(c)) {
        if (in_word) out.push_back(cur);
        cur.clear();
        in_word = false;
      } else {
        cur += c;
        in_word = true;
      }
    }
    if (quote) {
      throw ParseError{line, "entrypoint has an unterminated quote"};
    }
    if (in_word) out.push_back(cur);
    return out;
  }

  void Field(const std::string& key, const YAML::Node& v) {
    if (v.IsNull()) return;  // "key:" with no value: the default
    if (key == "name") {
      spec_->set_name(Str(v, "name"));
    } else if (key == "entrypoint") {
      std::vector<std::string> argv;
      if (v.IsSequence()) {
        for (const auto& e : v) argv.push_back(Str(e, "entrypoint element"));
      } else if (v.IsScalar()) {
        argv = SplitCommand(Text(v), Line(v));
      } else {
        throw ParseError{Line(v),
                         "entrypoint must be a command string or a list of "
                         "strings, got " + Kind(v)};
      }
      if (argv.empty()) throw ParseError{Line(v), "entrypoint is empty"};
      for (auto& a : argv) spec_->add_entrypoint(a);
    } else if (key == "train") {
      if (!v.IsMap()) {
        throw ParseError{Line(v), "train must be a mapping of frameworm-train "
                                  "options, got " + Kind(v)};
      }
      const auto fields = Fields(v, "train.", {});
      // batch_size and batch-size are one flag: the second is a duplicate,
      // not a silent override (before the loop below moves the lines).
      std::map<std::string, std::string> spelled;  // flag -> its key in the YAML
      for (const auto& [k, val] : fields) {
        std::string flag = k;
        std::replace(flag.begin(), flag.end(), '_', '-');
        if (auto [it, added] = spelled.emplace(flag, k); !added) {
          throw ParseError{lines_["train." + k],
                           absl::StrCat("duplicate field 'train.", ShownValue(k), "' ('",
                                        ShownValue(it->second), "' and '", ShownValue(k),
                                        "' are the same frameworm-train flag, --",
                                        ShownValue(flag), ")")};
        }
      }
      for (const auto& [k, val] : fields) {
        std::string flag = k;
        std::replace(flag.begin(), flag.end(), '_', '-');
        if (!val.IsScalar()) {
          throw ParseError{Line(val), absl::StrCat("train.", ShownValue(k),
                                                   " must be a scalar, got ",
                                                   Kind(val))};
        }
        lines_["train." + flag] = lines_["train." + k];
        (*spec_->mutable_train_options())[flag] = Text(val);
      }
    } else if (key == "nodes") {
      if (v.IsMap()) {
        bool has_min = false, has_max = false;
        for (const auto& [k, val] : Fields(v, "nodes.", {"min", "max"})) {
          if (val.IsNull()) continue;
          if (k == "min") {
            spec_->set_nodes_min(Int32(val, "nodes.min"));
            has_min = true;
          } else {
            spec_->set_nodes_max(Int32(val, "nodes.max"));
            has_max = true;
          }
        }
        if (!has_min) spec_->set_nodes_min(1);
        if (!has_max) spec_->set_nodes_max(spec_->nodes_min());
      } else {
        int32_t n = Int32(v, "nodes");
        spec_->set_nodes_min(n);
        spec_->set_nodes_max(n);
        lines_["nodes.min"] = lines_["nodes.max"] = lines_["nodes"];
      }
    } else if (key == "nproc_per_node") {
      spec_->set_nproc_per_node(Int32(v, "nproc_per_node"));
    } else if (key == "backend") {
      spec_->set_backend(Str(v, "backend"));
    } else if (key == "env" || key == "secret_env") {
      if (!v.IsMap()) {
        throw ParseError{Line(v), key + " must be a mapping NAME: value, got " +
                                      Kind(v)};
      }
      auto* out = key == "env" ? spec_->mutable_env() : spec_->mutable_secret_env();
      for (const auto& [k, val] : Fields(v, key + ".", {})) {
        if (!val.IsScalar() && !val.IsNull()) {
          throw ParseError{Line(val), absl::StrCat(key, ".", ShownValue(k),
                                                   " must be a scalar, got ",
                                                   Kind(val))};
        }
        (*out)[k] = val.IsNull() ? "" : Text(val);
      }
    } else if (key == "max_restarts") {
      spec_->set_max_restarts(Int32(v, "max_restarts"));
    } else if (key == "heartbeat_timeout") {
      spec_->set_heartbeat_timeout_s(Seconds(v, "heartbeat_timeout"));
    } else if (key == "priority") {
      spec_->set_priority(Int32(v, "priority"));
    } else if (key == "on_straggler") {
      if (!v.IsScalar()) {
        throw ParseError{Line(v), "on_straggler must be warn or restart_without, got " + Kind(v)};
      }
      spec_->set_on_straggler(Text(v));
    } else if (key == "straggler_grace") {
      spec_->set_straggler_grace_s(Seconds(v, "straggler_grace"));
    } else if (key == "total_steps") {
      spec_->set_total_steps(Int(v, "total_steps"));
    } else if (key == "checkpoint") {
      if (!v.IsMap()) {
        throw ParseError{Line(v), "checkpoint must be a mapping, got " + Kind(v)};
      }
      v1::CheckpointPolicy* c = spec_->mutable_checkpoint();
      for (const auto& [k, val] :
           Fields(v, "checkpoint.",
                  {"dir", "every_n_steps", "every_n_minutes", "keep_last", "replicas",
                   "memory_every_n_steps"})) {
        if (val.IsNull()) continue;
        if (k == "dir") {
          c->set_dir(Str(val, "checkpoint.dir"));
        } else if (k == "every_n_steps") {
          c->set_every_n_steps(Int(val, "checkpoint.every_n_steps"));
        } else if (k == "every_n_minutes") {
          c->set_every_n_minutes(Number(val, "checkpoint.every_n_minutes"));
        } else if (k == "memory_every_n_steps") {
          c->set_memory_every_n_steps(Int(val, "checkpoint.memory_every_n_steps"));
        } else if (k == "replicas") {
          c->set_replicas(Int32(val, "checkpoint.replicas"));
        } else {
          c->set_keep_last(Int32(val, "checkpoint.keep_last"));
        }
      }
    }
  }

 private:
  v1::JobSpec* spec_;
  std::map<std::string, int> lines_;
  size_t expanded_ = 0;  // bytes counted by Text()
};

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(const std::string& yaml,
                                             const std::string& source_name) {
  const std::string src = source_name.empty() ? "<job spec>" : source_name;
  // UTF-16 and UTF-32 text (which yaml-cpp would decode) holds NUL bytes,
  // or starts with their byte-order mark: refused whole, since the check
  // for a second document below reads the bytes as UTF-8.
  if (yaml.find('\0') != std::string::npos || absl::StartsWith(yaml, "\xff\xfe") ||
      absl::StartsWith(yaml, "\xfe\xff")) {
    return absl::InvalidArgumentError(absl::StrCat(
        src, ": not UTF-8 text (it holds NUL bytes or a UTF-16 byte-order mark: saved as "
        "UTF-16 or UTF-32?); a job spec is UTF-8, save it as that"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
    // A second document is refused rather than ignored (a file of two jobs
    // would submit the first alone). Found by its markers, not by
    // YAML::LoadAll, which loops forever on some inputs ("!,").
    if (std::optional<int> line = SecondDocumentLine(yaml)) {
      return absl::InvalidArgumentError(absl::StrCat(
          src, ":", *line, ": a second YAML document (after '---'); a job spec file holds one "
          "job, in one document"));
    }
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        src, ":", e.mark.line + 1, ": malformed YAML: ", e.msg));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": malformed YAML: ", e.what()));
  }

  // Defaults first; explicit fields overwrite them.
  v1::JobSpec spec;
  spec.set_nodes_min(1);
  spec.set_nodes_max(1);
  spec.set_nproc_per_node(1);
  spec.mutable_checkpoint()->set_keep_last(kDefaultKeepLast);
  Parser parser(&spec);
  try {
    parser.ParseTop(root);
  } catch (const ParseError& e) {
    return absl::InvalidArgumentError(
        e.line > 0 ? absl::StrCat(src, ":", e.line, ": ", e.message)
                   : absl::StrCat(src, ": ", e.message));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (spec.entrypoint().empty()) spec.add_entrypoint("frameworm-train");
  // Progress/ETA: the built-in trainer's --max-steps is the total.
  if (spec.total_steps() == 0) {
    auto it = spec.train_options().find("max-steps");
    int64_t n;
    if (it != spec.train_options().end() && absl::SimpleAtoi(it->second, &n) &&
        n > 0) {
      spec.set_total_steps(n);
    }
  }

  if (auto err = CheckSpec(spec)) {
    // Report at the line of the field, or of its enclosing section.
    const auto& lines = parser.lines();
    int line = 0;
    for (std::string f = err->field; !f.empty();) {
      auto it = lines.find(f);
      if (it != lines.end()) {
        line = it->second;
        break;
      }
      size_t dot = f.rfind('.');
      f = dot == std::string::npos ? "" : f.substr(0, dot);
    }
    return absl::InvalidArgumentError(
        line > 0 ? absl::StrCat(src, ":", line, ": ", err->message)
                 : absl::StrCat(src, ": ", err->message));
  }
  return spec;
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (auto err = CheckSpec(spec)) {
    return absl::InvalidArgumentError(err->message);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> NormalizeJobSpec(v1::JobSpec spec) {
  if (spec.nproc_per_node() == 0) spec.set_nproc_per_node(1);
  if (spec.nodes_min() == 0) spec.set_nodes_min(1);
  if (spec.nodes_max() == 0) spec.set_nodes_max(spec.nodes_min());
  // A client that sends the proto and leaves keep_last out gets the YAML
  // default, not "keep every checkpoint" (0 set on purpose stays 0).
  if (!spec.checkpoint().has_keep_last()) {
    spec.mutable_checkpoint()->set_keep_last(kDefaultKeepLast);
  }
  if (auto err = CheckSpec(spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", err->message));
  }
  return spec;
}

bool UsesBuiltInTrainer(const v1::JobSpec& spec) {
  return spec.entrypoint().empty() || spec.entrypoint(0) == "frameworm-train";
}

}  // namespace frameworm
