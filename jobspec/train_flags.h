// The built-in trainer's command-line flags as a job spec's `train:` map
// names them (dashed: `train: {batch_size: 64}` becomes --batch-size=64),
// so that a misspelt option or a value of the wrong kind is refused when
// the job is submitted, at its line of the YAML, instead of failing every
// generation of the job on the workers (frameworm-train exits 2).
//
// The table is frameworm-train's ABSL_FLAGs (trainer/main.cc), by name
// and type; trainer/main_test.cc's TrainFlagsTableIsTheTrainers runs the
// binary to prove the two agree. Values are parsed as absl parses the
// trainer's flags (absl::ParseFlag: "0x10" is an integer, "yes" a bool),
// so what passes here passes the trainer's parser; ranges and meanings
// (--lr > 0, --model names a model) stay the trainer's to check.
//
// Thread safety: pure functions over a constant table.
#ifndef FRAMEWORM_JOBSPEC_TRAIN_FLAGS_H_
#define FRAMEWORM_JOBSPEC_TRAIN_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace frameworm {

enum class TrainFlagKind { kString, kBool, kInt64, kUint64, kDouble };

struct TrainFlag {
  const char* name;  // dashed: "batch-size"
  TrainFlagKind kind;
};

// Every flag frameworm-train accepts, sorted by name.
const std::vector<TrainFlag>& TrainFlags();

// What kind of value `kind` takes, for messages ("an integer").
const char* TrainFlagKindName(TrainFlagKind kind);

// nullopt when `value` is a valid value of frameworm-train's flag `name`;
// else the problem, naming neither the field nor its line:
//   "is not a frameworm-train flag (did you mean 'lr'?)"
//   "must be an integer, got '1.5'"
std::optional<std::string> CheckTrainOption(const std::string& name,
                                            const std::string& value);

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
