// The one command-line flag parser of every Frameworm binary, over absl
// flags: each main declares its flags with ABSL_FLAG (names with '_'; on the
// command line '-' and '_' are the same, so --state-dir sets state_dir) and
// calls ParseFlagsOrExit once, before anything else reads a flag.
//
// Syntax: --name=value, --name value (not for booleans), --flag / --noflag
// or --flag=true|false for booleans, "--" ends the flags; everything else is
// a positional argument, kept in order (flags may stand anywhere, so
// `frameworm-cli logs ID --rank 1` works). A FlagsConfig may name aliases
// ("-f" for "--follow") and environment fallbacks: a flag that is not on
// the command line takes the variable's value when it is set and non-empty.
//
// --help (or -h) prints the usage text, then every flag of the binary with
// its help text, its default and its environment fallback, and exits 0;
// --version prints "<program> <FRAMEWORM_VERSION>" and exits 0. A bad flag
// (unknown name, bad value, missing value) prints one line
// "<program>: <problem> (see --help)" to stderr and exits 2.
//
// Thread safety: call ParseFlags* from one thread at start-up (absl flags
// are process-wide); tests that parse repeatedly hold an absl::FlagSaver.
#ifndef FRAMEWORM_COMMON_FLAGS_H_
#define FRAMEWORM_COMMON_FLAGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rank_env.h"

namespace frameworm {

// The project's version, printed by --version.
const char* Version();

struct FlagsConfig {
  std::string program;  // "frameworm-coordinator"
  std::string usage;    // printed first by --help ("usage: ...\n...")
  // flag name (with '_' or '-') -> environment variable.
  std::map<std::string, std::string> env_fallbacks;
  // alias ("-f") -> flag name ("follow"); a boolean alias sets it true.
  std::map<std::string, std::string> aliases;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  bool help = false;     // --help/-h was given (nothing else was checked)
  bool version = false;  // --version was given
  // Flags (names as declared, "tls_dir") whose value came from an
  // environment fallback, and that variable's name ("FRAMEWORM_TLS_DIR"),
  // so that a later check of the value names what the user set.
  std::map<std::string, std::string> from_env;
};

// Parses `args` (argv without argv[0]) into the process's absl flags.
// Errors: INVALID_ARGUMENT with the problem alone ("unknown flag --x (did
// you mean --y?)", "--port-range: ...", "$VAR: ..."), nothing else changed
// after the first error is not guaranteed.
absl::StatusOr<ParsedArgs> ParseFlags(const std::vector<std::string>& args,
                                      const FlagsConfig& config,
                                      const EnvLookup& env);

// The --help text: config.usage, then the binary's flags.
std::string FlagsHelp(const FlagsConfig& config);

// ParseFlags over argv and the process environment; handles --help,
// --version and errors as the header says (exits). Returns the positional
// arguments.
std::vector<std::string> ParseFlagsOrExit(int argc, char** argv,
                                          const FlagsConfig& config);

// For flag values the binary checks itself after parsing: prints
// "<program>: <message> (see --help)" and exits 2.
[[noreturn]] void FlagErrorExit(const FlagsConfig& config,
                                const std::string& message);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_FLAGS_H_
