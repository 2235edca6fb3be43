// RunCli: the CLI's flags (common/flags.h), the checks of a command line
// against the command table (client/cli_commands.h), then the command.
#include "client/cli.h"

#include <algorithm>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli_commands.h"
#include "common/closest_match.h"
#include "common/node_address.h"
#include "common/printable.h"
#include "common/flags.h"
#include "rpc/rpc.h"

ABSL_FLAG(std::string, coordinator, frameworm::kDefaultCoordinator,
          "the coordinator's address, HOST:PORT");
ABSL_FLAG(bool, json, false, "print the response as JSON (every read command)");
ABSL_FLAG(bool, csv, false, "metrics: print CSV");
ABSL_FLAG(bool, dry_run, false,
          "submit: check the job file with the coordinator's spec rules and print what it "
          "would run, without submitting it (the coordinator's own checks, such as "
          "checkpoint.dir under its --checkpoint-root, still apply at submit)");
ABSL_FLAG(bool, follow, false, "logs: keep printing while the job runs");
ABSL_FLAG(int, rank, -1,
          "logs: only rank N's output, raw; -1: every rank, each line "
          "prefixed \"[rank N] \"; debug: only rank N's stacks");
ABSL_FLAG(int64_t, since, 0, "metrics: only the steps after this one");
ABSL_FLAG(int64_t, step, 0, "download: the checkpoint of this step; 0: the newest");
ABSL_FLAG(std::string, tls_dir, "",
          "mutual TLS to the coordinator with this directory's ca.crt, tls.crt and tls.key "
          "(made by `admin ca issue`); empty: plaintext");
ABSL_FLAG(std::string, ca_dir, "", "admin ca: the cluster CA's directory (ca.crt, ca.key)");
ABSL_FLAG(std::string, role, "", "admin ca issue: coordinator, worker, user or admin");
ABSL_FLAG(std::string, name, "",
          "admin ca issue: the identity (a worker's --name, a user's login)");
ABSL_FLAG(std::string, out, "", "admin ca issue: the TLS directory to create (default ./<role>-<name>)");
ABSL_FLAG(int, days, 0, "admin ca: validity in days (default 3650 for the CA, 825 for others)");

namespace frameworm {
namespace {

constexpr char kProgram[] = "frameworm-cli";

std::string Usage() {
  std::string out = absl::StrCat(
      "usage: ", kProgram, " [--coordinator HOST:PORT] <command> [args]\n",
      "commands:\n");
  constexpr size_t kColumn = 29;  // where summaries start, after "  "
  for (const Command& c : Commands()) {
    std::string synopsis(c.synopsis);
    synopsis.resize(std::max(kColumn, synopsis.size() + 1), ' ');
    absl::StrAppend(&out, "  ", synopsis);
    for (char ch : c.summary) {
      out += ch;
      if (ch == '\n') out += std::string(kColumn + 2, ' ');
    }
    out += "\n";
  }
  return out;
}

const FlagsConfig& Config() {
  static const FlagsConfig* config = new FlagsConfig{
      kProgram,
      Usage(),
      {{"coordinator", "FRAMEWORM_COORDINATOR"}, {"tls_dir", "FRAMEWORM_TLS_DIR"}},
      {{"-f", "follow"}},
  };
  return *config;
}

// Sets `flag` back to its declared default (its default's text parses
// back: absl flags round-trip their values).
template <typename T>
void ResetFlag(absl::Flag<T>& flag) {
  T value{};
  std::string error;
  if (absl::ParseFlag(absl::GetFlagReflectionHandle(flag).DefaultValue(),
                      &value, &error)) {
    absl::SetFlag(&flag, value);
  }
}

// Every CLI flag as if the command line had none: RunCli may run many
// times in one process (tests).
void ResetFlags(const CliOptions& options) {
  ResetFlag(FLAGS_json);
  ResetFlag(FLAGS_csv);
  ResetFlag(FLAGS_dry_run);
  ResetFlag(FLAGS_follow);
  ResetFlag(FLAGS_rank);
  ResetFlag(FLAGS_since);
  ResetFlag(FLAGS_step);
  ResetFlag(FLAGS_tls_dir);
  ResetFlag(FLAGS_ca_dir);
  ResetFlag(FLAGS_role);
  ResetFlag(FLAGS_name);
  ResetFlag(FLAGS_out);
  ResetFlag(FLAGS_days);
  absl::SetFlag(&FLAGS_coordinator, options.default_coordinator);
}

// The command the positional arguments name, with the flags it may take.
struct CommandLine {
  const Command* command = nullptr;
  std::vector<std::string> args;
  CommandFlags flags;
};

// Checks the parsed flags and positional arguments. Errors:
// INVALID_ARGUMENT with the usage problem ("no command given", ...).
// `coordinator_source`: what set --coordinator ("--coordinator", or
// "$FRAMEWORM_COORDINATOR" when it came from there), named in its error.
absl::StatusOr<CommandLine> Check(const std::vector<std::string>& positional,
                                  const std::string& coordinator_source) {
  CommandLine out;
  out.flags = {absl::GetFlag(FLAGS_json), absl::GetFlag(FLAGS_csv),
               absl::GetFlag(FLAGS_follow), absl::GetFlag(FLAGS_rank),
               absl::GetFlag(FLAGS_since),  absl::GetFlag(FLAGS_step),
               absl::GetFlag(FLAGS_ca_dir), absl::GetFlag(FLAGS_role),
               absl::GetFlag(FLAGS_name),   absl::GetFlag(FLAGS_out),
               absl::GetFlag(FLAGS_days), absl::GetFlag(FLAGS_dry_run)};
  const CommandFlags& f = out.flags;
  if (const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
      !IsDialEndpoint(coordinator)) {
    return absl::InvalidArgumentError(absl::StrCat(
        coordinator_source, " needs HOST:PORT with a port 1..65535, got '",
        PrintableLine(coordinator, 200), "'"));
  }
  if (f.rank < -1)
    return absl::InvalidArgumentError(
        "--rank needs a rank number >= 0 (or -1: every rank)");
  if (f.since < 0)
    return absl::InvalidArgumentError("--since needs a step number >= 0");
  if (f.step < 0)
    return absl::InvalidArgumentError("--step needs a step number >= 1 (0: the newest)");
  if (positional.empty()) return absl::InvalidArgumentError("no command given");
  const std::string& name = positional[0];
  std::vector<std::string> names;
  for (const Command& c : Commands()) {
    if (c.name == name) out.command = &c;
    names.emplace_back(c.name);
  }
  if (out.command == nullptr) {
    const std::string best = ClosestMatch(name, names);
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown command '", name, "'",
        best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)")));
  }
  out.args.assign(positional.begin() + 1, positional.end());
  const int max_args = out.command->max_args < 0 ? out.command->args : out.command->max_args;
  if (static_cast<int>(out.args.size()) < out.command->args ||
      static_cast<int>(out.args.size()) > max_args)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " takes ", out.command->takes, ", got ", out.args.size()));
  if (f.csv && name != "metrics")
    return absl::InvalidArgumentError("--csv applies to metrics only");
  if (f.json && f.csv)
    return absl::InvalidArgumentError("--json and --csv exclude each other");
  if (f.dry_run && name != "submit")
    return absl::InvalidArgumentError("--dry-run applies to submit only");
  if (f.step != 0 && name != "download")
    return absl::InvalidArgumentError("--step applies to download only");
  if (f.rank >= 0 && name != "logs" && name != "debug")
    return absl::InvalidArgumentError("--rank applies to logs and debug only");
  if (f.follow && name != "logs" && name != "events")
    return absl::InvalidArgumentError("-f applies to logs and events only");
  const bool admin = name == "admin";
  if (admin && (out.args[0] != "ca" || (out.args[1] != "init" && out.args[1] != "issue")))
    return absl::InvalidArgumentError("admin takes 'ca init' or 'ca issue'");
  if (!admin && (!f.ca_dir.empty() || !f.role.empty() || !f.name.empty() || !f.out_dir.empty() ||
                 f.days != 0))
    return absl::InvalidArgumentError("--ca-dir, --role, --name, --out and --days apply to admin ca only");
  if (admin && f.ca_dir.empty())
    return absl::InvalidArgumentError("admin ca needs --ca-dir DIR (the cluster CA's directory)");
  if (admin && out.args[1] == "issue" && (f.role.empty() || f.name.empty()))
    return absl::InvalidArgumentError("admin ca issue needs --role and --name");
  if (f.days < 0) return absl::InvalidArgumentError("--days needs a number of days >= 1");
  return out;
}

}  // namespace

int RunCli(const std::vector<std::string>& args, const CliOptions& options,
           std::ostream& out, std::ostream& err) {
  auto usage_error = [&err](const absl::Status& s) {
    err << kProgram << ": " << s.message() << " (see --help)\n";
    return 2;
  };
  ResetFlags(options);
  const EnvLookup no_env = [](const std::string&) {
    return std::optional<std::string>();
  };
  absl::StatusOr<ParsedArgs> parsed =
      ParseFlags(args, Config(), options.env ? options.env : no_env);
  if (!parsed.ok()) return usage_error(parsed.status());
  if (parsed->help ||
      (!parsed->positional.empty() && parsed->positional[0] == "help")) {
    out << FlagsHelp(Config());
    return 0;
  }
  if (parsed->version) {
    out << kProgram << " " << Version() << "\n";
    return 0;
  }
  // A value from the environment is named by its variable in errors.
  auto source = [&](const std::string& flag, const std::string& dashed) {
    auto it = parsed->from_env.find(flag);
    return it == parsed->from_env.end() ? dashed : absl::StrCat("$", it->second);
  };
  absl::StatusOr<CommandLine> line =
      Check(parsed->positional, source("coordinator", "--coordinator"));
  if (!line.ok()) return usage_error(line.status());
  std::optional<TlsFiles> tls;
  // `admin ca` dials nobody: a $FRAMEWORM_TLS_DIR that does not load (an
  // expired user certificate) must not keep an admin from issuing a new one.
  if (const std::string dir = absl::GetFlag(FLAGS_tls_dir);
      !dir.empty() && parsed->positional[0] != "admin") {
    absl::StatusOr<TlsFiles> loaded = LoadTlsDir(dir);
    if (!loaded.ok()) {
      err << kProgram << ": " << source("tls_dir", "--tls-dir") << ": "
          << loaded.status().message() << "\n";
      return 1;
    }
    tls = *std::move(loaded);
  }
  std::unique_ptr<v1::JobService::Stub> stub = v1::JobService::NewStub(
      MakeChannel(absl::GetFlag(FLAGS_coordinator), tls ? &*tls : nullptr));
  const Invocation invocation{
      parsed->positional[0], std::move(line->args), line->flags, options,
      *stub,                 out,                   err};
  return line->command->run(invocation);
}

}  // namespace frameworm
