// frameworm-cli's commands: one function per command, each over the shared
// call/print helpers of cli_commands.cc, and the table RunCli (client/cli.h)
// parses against and dispatches through. What each prints: client/cli.h.
//
// Thread safety: the table is constant; a command uses only its Invocation.
#ifndef FRAMEWORM_CLIENT_CLI_COMMANDS_H_
#define FRAMEWORM_CLIENT_CLI_COMMANDS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/cli.h"
#include "frameworm/v1/job_service.grpc.pb.h"

namespace frameworm {

// The flag values a command reads, already checked (RunCli owns parsing).
struct CommandFlags {
  bool json = false;   // print responses as ToJson
  bool csv = false;    // metrics only
  bool follow = false; // logs and events
  int rank = -1;       // logs only; -1: every rank
  int64_t since = 0;   // metrics: steps after this one
  int64_t step = 0;    // download: the checkpoint's step; 0: the newest
  // admin ca init|issue (client/cli_admin.cc).
  std::string ca_dir, role, name, out_dir;
  int days = 0;  // 0: the default validity
  bool dry_run = false;  // submit: check and print, submit nothing
};

// One run of one command.
struct Invocation {
  std::string command;            // "status"
  std::vector<std::string> args;  // its positional arguments, count checked
  CommandFlags flags;
  const CliOptions& options;
  v1::JobService::Stub& stub;  // to the coordinator
  std::ostream& out;
  std::ostream& err;
};

struct Command {
  absl::string_view name;         // "status"
  int (*run)(const Invocation&);  // returns the exit code
  int args;                       // how many positional arguments it takes
  absl::string_view takes;        // those, in words, for "<name> takes ..."
  absl::string_view synopsis;     // "status ID", in --help
  absl::string_view summary;      // what it does, in --help; may hold '\n'
  int max_args = -1;              // more (optional) arguments; -1: exactly `args`
};

// `admin ca init` / `admin ca issue` (client/cli_admin.cc): no coordinator.
int Admin(const Invocation& c);

// Every command, in --help order.
absl::Span<const Command> Commands();

}  // namespace frameworm

#endif  // FRAMEWORM_CLIENT_CLI_COMMANDS_H_
