// frameworm-cli's commands as a library: RunCli() parses arguments, talks
// to the coordinator's JobService and prints; the Format* functions turn
// responses into text without a network (tested directly).
//
// Output formats (stdout):
//   submit       the job id alone on one line
//   list         table: ID NAME STATE GEN RESTARTS STEP WORKERS
//   status       "key: value" lines (id, name, state, generation, restarts,
//                step, workers, reason, log dir, ...)
//   watch        a progress line per update (FormatProgress); on a terminal
//                it rewrites one line. Exit 0 only when the job SUCCEEDED.
//   logs         the raw log bytes (with --rank) or lines prefixed "[rank N] "
//   cancel       "cancelled <id> (<state>)"
//   checkpoint   "checkpoint of <id> requested at step <n>"
//   checkpoints  table: STEP PATH BYTES CHECKSUM CREATED
//   metrics      table: STEP EPOCH RANKS SAMPLES <value columns> STRAGGLERS;
//                --csv: the same columns as CSV; --json: the response
//   workers      table: NAME ADDRESS SLOTS FREE ALIVE LAST_HEARTBEAT TASKS
// --json on every read command prints the response message as JSON.
// Errors (stderr, one line): "frameworm-cli: <command>: <CODE>: <message>",
// exit 1; usage errors print usage and exit 2.
//
// Thread safety: free functions, no shared state.
#ifndef FRAMEWORM_CLIENT_CLI_H_
#define FRAMEWORM_CLIENT_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "frameworm/v1/job_service.pb.h"

namespace frameworm {

struct CliOptions {
  std::string default_coordinator = "127.0.0.1:7070";  // env, read in main
  bool live = false;  // stdout is a terminal: watch rewrites one line
  absl::Duration call_timeout = absl::Seconds(10);
};

// args excludes argv[0]. Returns the process exit code.
int RunCli(const std::vector<std::string>& args, const CliOptions& options,
           std::ostream& out, std::ostream& err);

std::string StateName(v1::JobState s);
std::string HumanDuration(absl::Duration d);  // "1h02m", "3m05s", "42s"
std::string FormatProgress(const v1::JobStatus& job);
std::string FormatJobTable(const v1::ListJobsResponse& r);
std::string FormatJobStatus(const v1::JobStatus& job);
std::string FormatCheckpoints(const v1::ListCheckpointsResponse& r);
std::string FormatMetricsTable(const v1::GetMetricsResponse& r);
std::string FormatMetricsCsv(const v1::GetMetricsResponse& r);
std::string FormatWorkers(const v1::ListWorkersResponse& r);
// Compact single-line JSON of any message.
std::string ToJson(const google::protobuf::Message& m);

}  // namespace frameworm

#endif  // FRAMEWORM_CLIENT_CLI_H_
