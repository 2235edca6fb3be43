// frameworm-cli's text: JobService responses turned into what the commands
// print (formats in client/cli.h), without a network. Tables are padded
// columns separated by two spaces, one row per line, a header row first;
// times are local "YYYY-MM-DD HH:MM:SS", "-" when unset.
//
// Thread safety: pure functions.
#ifndef FRAMEWORM_CLIENT_CLI_FORMAT_H_
#define FRAMEWORM_CLIENT_CLI_FORMAT_H_

#include <string>

#include "absl/time/time.h"
#include "frameworm/v1/job_service.pb.h"

namespace frameworm {

std::string StateName(v1::JobState s);        // "RUNNING"; "UNKNOWN" if unset
std::string HumanDuration(absl::Duration d);  // "1h02m", "3m05s", "42s"
// One line, no newline: "<id> <STATE> [gen G] step S[/T (P%)] [loss L]
// [X samples/s] [ETA D] [restarts R] [stragglers [..]][: reason]".
std::string FormatProgress(const v1::JobStatus& job);
std::string FormatJobTable(const v1::ListJobsResponse& r);
std::string FormatJobStatus(const v1::JobStatus& job);  // "key: value" lines
std::string FormatCheckpoints(const v1::ListCheckpointsResponse& r);
// One line per event, no header (a followed stream): "<time>  <kind padded
// to 18>  <message>".
std::string FormatEvents(const v1::ListEventsResponse& r);
std::string FormatMetricsTable(const v1::GetMetricsResponse& r);
std::string FormatMetricsCsv(const v1::GetMetricsResponse& r);
std::string FormatWorkers(const v1::ListWorkersResponse& r);
// submit --dry-run: a checked spec as "key: value" lines (name, nodes,
// processes per node, backend, command, train options, restarts, steps).
std::string FormatSpecSummary(const v1::JobSpec& spec);
// debug's flight recorders: per rank a header ("rank 0 (its ping 0.4 s
// ago): issued #175, completed #174"), then one line per collective
// ("  #175 allreduce gradients bucket 0 (1.6 MiB) started, enqueued 5.8 s
// before"), then the comparison's sentence; empty when there is none.
std::string FormatRecorders(const v1::DebugJobResponse& r);
// Compact single-line JSON of any message (proto field names, defaults
// printed), no newline.
std::string ToJson(const google::protobuf::Message& m);

}  // namespace frameworm

#endif  // FRAMEWORM_CLIENT_CLI_FORMAT_H_
