// frameworm-cli's commands as a library: RunCli() parses arguments, talks
// to the coordinator's JobService and prints; the formatters that turn
// responses into text without a network are in client/cli_format.h, the
// commands in client/cli_commands.h.
//
// Command line: frameworm-cli [flags] <command> [args]; flags may stand
// anywhere (common/flags.h): --coordinator HOST:PORT (or
// $FRAMEWORM_COORDINATOR, else CliOptions::default_coordinator), --json,
// --csv, --follow/-f, --rank N, --since STEP.
//
// Output formats (stdout):
//   submit       the job id alone on one line; --dry-run: "<file> is a valid
//                job spec (not submitted):" and FormatSpecSummary's lines
//                (--json: the normalized JobSpec), nothing sent
//   list         table: ID NAME STATE GEN RESTARTS STEP WORKERS
//   status       "key: value" lines (id, name, state, generation, restarts,
//                step, workers, reason, last cause, log dir, ...)
//   watch        a progress line per update (FormatProgress); on a terminal
//                it rewrites one line. Exit 0 only when the job SUCCEEDED.
//   logs         the raw log bytes (with --rank) or lines prefixed "[rank N] "
//   cancel       "cancelled <id> (<state>)"
//   checkpoint   "checkpoint of <id> requested at step <n>"
//   checkpoints  table: STEP PATH BYTES CHECKSUM CREATED
//   metrics      table: STEP EPOCH RANKS SAMPLES <value columns> STRAGGLERS;
//                --csv: the same columns as CSV; --json: the response
//   workers      table: NAME ADDRESS SLOTS FREE ALIVE LAST_HEARTBEAT TASKS
//   events       a line per event: "<time>  <kind>  <message>" (-f follows;
//                --json: one Event per line)
// --json on every read command prints the response message as JSON.
// --help, -h or the command "help": usage, commands and every flag with its
// default, exit 0; --version: "frameworm-cli <version>", exit 0.
// Errors (stderr, one line): a failed command prints
// "frameworm-cli: <command>: <CODE>: <message>" and exits 1; a usage error
// (bad flag or value, unknown command, wrong arguments) prints
// "frameworm-cli: <problem> (see --help)" and exits 2.
//
// Thread safety: RunCli sets the process's absl flags (the CLI's own):
// call it from one thread at a time. Each call starts from the defaults.
#ifndef FRAMEWORM_CLIENT_CLI_H_
#define FRAMEWORM_CLIENT_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/cli_format.h"
#include "common/rank_env.h"

namespace frameworm {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

struct CliOptions {
  // --coordinator when neither the flag nor $FRAMEWORM_COORDINATOR is given.
  std::string default_coordinator = kDefaultCoordinator;
  // Where $FRAMEWORM_COORDINATOR is looked up; unset: no environment (main
  // passes ProcessEnvLookup()).
  EnvLookup env;
  bool live = false;  // stdout is a terminal: watch rewrites one line
  absl::Duration call_timeout = absl::Seconds(10);  // per unary call
  // watch, logs -f and events -f: how long the coordinator may stay
  // unreachable (UNAVAILABLE: a restart) before they give up; they
  // reconnect meanwhile, once a second.
  absl::Duration reconnect_for = absl::Minutes(5);
};

// args excludes argv[0]. Returns the process exit code.
int RunCli(const std::vector<std::string>& args, const CliOptions& options,
           std::ostream& out, std::ostream& err);

}  // namespace frameworm

#endif  // FRAMEWORM_CLIENT_CLI_H_
