// The built-in trainer's command-line flags as a job spec's `train:` map
// names them (dashed: `train: {batch_size: 64}` becomes --batch-size=64),
// with the values each accepts, so that a misspelt option, a value of the
// wrong kind or one out of range is refused when the job is submitted, at
// its line of the YAML, instead of failing every generation of the job on
// the workers (frameworm-train exits 2).
//
// The table is frameworm-train's ABSL_FLAGs (trainer/main.cc), by name
// and type, and the trainer checks its own values with it
// (CheckTrainOption, CheckTrainOptionSet): what a submit accepts is what
// the trainer accepts. trainer/main_test.cc's TrainFlagsTableIsTheTrainers
// runs the binary to prove the names and kinds agree. Values are parsed as
// absl parses the trainer's flags (absl::ParseFlag: "0x10" is an integer,
// "yes" a bool). What depends on the machine that trains (--model naming a
// file, --data-dir's contents) stays the trainer's to check.
//
// Library: frameworm_train_flags (common and absl only, no protobuf), so
// that frameworm-train links it without the job spec's proto types.
//
// Thread safety: pure functions over a constant table.
#ifndef FRAMEWORM_JOBSPEC_TRAIN_FLAGS_H_
#define FRAMEWORM_JOBSPEC_TRAIN_FLAGS_H_

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace frameworm {

enum class TrainFlagKind { kString, kBool, kInt64, kUint64, kDouble };

struct TrainFlag {
  const char* name;  // dashed: "batch-size"
  TrainFlagKind kind;
  // What the trainer accepts beyond the kind; unset fields accept all.
  // Integers and numbers (and a string's numeric alternative, below): the
  // range, each end included unless marked open (--lr > 0).
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;
  // Strings: the accepted values ("" among them when an empty value is).
  // With `integer_too`, an integer within [min, max] is accepted as well
  // (--memory-checkpoint-every: auto or a count).
  std::vector<const char*> choices = {};
  bool integer_too = false;
  // Strings: a comma-separated list of non-empty names (--inputs).
  bool name_list = false;
  // Strings: besides `choices`, a comma-separated list of these names,
  // each at most once (--metrics: auto, none or accuracy,mae).
  std::vector<const char*> list_of = {};
  // Strings: a file or directory the trainer reads or writes. With
  // choices, any other non-empty value is a path (--model: cnn, mlp or a
  // file; not empty); without, any value is (empty: none). What it names
  // is the trainer's to check. A cluster job's must be absolute (jobspec's
  // rule: a job's trainer runs in the worker's directory, not the
  // submitter's).
  bool path = false;
};

// Every flag frameworm-train accepts, sorted by name.
const std::vector<TrainFlag>& TrainFlags();

// The flag named `name` (dashed), or null.
const TrainFlag* FindTrainFlag(const std::string& name);

// True when `value` of flag `f` names a path (a path flag's value that is
// not empty and none of its choices).
bool IsTrainPathValue(const TrainFlag& f, const std::string& value);

// What kind of value `kind` takes, for messages ("an integer").
const char* TrainFlagKindName(TrainFlagKind kind);

// nullopt when `value` is a valid value of frameworm-train's flag `name`
// (its kind, then its range or choices); else the problem, naming neither
// the field nor its line:
//   "is not a frameworm-train flag (did you mean 'lr'?)"
//   "must be an integer, got '1.5'"
//   "must be an integer between 1 and 1024, got '100000'"
//   "must be auto, cpu or cuda, got 'tpu'"
std::optional<std::string> CheckTrainOption(const std::string& name,
                                            const std::string& value);

// A rule that joins flags, broken: the flags it joins and the problem.
struct TrainOptionSetProblem {
  std::vector<std::string> flags;  // dashed: {"lr-schedule", "lr-step-size"}
  std::string message;             // "--lr-schedule=step needs --lr-step-size >= 1, got 0"
};

// The rules that join flags, over the options one run gets (dashed name ->
// value; an absent flag has the trainer's default): nullopt, or the first
// broken. Each value is assumed to pass CheckTrainOption. The rules:
// --lr-schedule=step needs --lr-step-size >= 1; --monitor names loss or
// one of the run's metrics (--metrics, or auto's for --loss), with or
// without "val_" (the trainer's Trainer::CheckOptions).
std::optional<TrainOptionSetProblem> CheckTrainOptionSet(
    const std::map<std::string, std::string>& options);

// One flag of a command line as frameworm-train's parser reads it
// (common/flags.h): name dashed ("batch_size" -> "batch-size"), value as
// given ("true" for a bare boolean, "false" for --no<boolean>).
struct TrainArg {
  std::string name;
  std::string value;
};

// The flags of frameworm-train's arguments (a job's entrypoint after
// "frameworm-train"), read as its parser reads them: --name=value,
// --name value (not for booleans), --flag / --noflag. Errors (the problem
// alone, as CheckTrainOption's) for what the trainer would refuse or that
// would not train: an argument that is no flag (it takes none), a flag
// missing its value, --help / --version. A name that is no flag of the
// trainer ends the list (its parser stops there too), for CheckTrainOption
// to name.
absl::StatusOr<std::vector<TrainArg>> SplitTrainArgs(const std::vector<std::string>& args);

}  // namespace frameworm

#endif  // FRAMEWORM_JOBSPEC_TRAIN_FLAGS_H_
