#include "client/cli_commands.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli_format.h"
#include "common/received_file.h"
#include "jobspec/job_spec.h"
#include "rpc/status_util.h"

namespace frameworm {
namespace {

using Stub = v1::JobService::Stub;

// The error line "frameworm-cli: <command>: <message>"; exit code 1.
int Fail(const Invocation& c, absl::string_view message) {
  c.err << "frameworm-cli: " << c.command << ": " << message << "\n";
  return 1;
}
// ... with the status's code first: "<CODE>: <message>".
int Fail(const Invocation& c, const absl::Status& s) {
  return Fail(c, absl::StrCat(absl::StatusCodeToString(s.code()), ": ",
                              s.message()));
}
int Fail(const Invocation& c, const grpc::Status& s) { return Fail(c, FromGrpcStatus(s)); }

const std::string& JobId(const Invocation& c) { return c.args[0]; }

// A follower's (watch, logs -f, events -f) reconnection across a
// coordinator restart: after an attempt that ended with UNAVAILABLE or
// DEADLINE_EXCEEDED (or, for a stream, OK before its end), Again tells the
// user once per outage that it reconnects, waits a second and returns true,
// until the coordinator has been away for options.reconnect_for; then, or
// for any other error, false. An attempt that read anything ends the outage.
class Reconnects {
 public:
  explicit Reconnects(const Invocation& c) : c_(c) {}
  // `before_notice` runs before the notice (watch ends its live line).
  bool Again(const grpc::Status& s, bool read_any,
             const std::function<void()>& before_notice = nullptr) {
    if (!s.ok() && s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED)  // one starting up
      return false;
    if (read_any) away_since_.reset();
    const absl::Time now = absl::Now();
    if (!away_since_) {
      if (before_notice) before_notice();
      c_.err << "frameworm-cli: " << c_.command << ": the coordinator is unavailable ("
             << (s.ok() ? std::string("its stream ended") : s.error_message())
             << "); reconnecting for up to " << absl::FormatDuration(c_.options.reconnect_for)
             << std::endl;
      away_since_ = now;
    }
    if (now - *away_since_ >= c_.options.reconnect_for) return false;
    absl::SleepFor(absl::Seconds(1));
    return true;
  }
  void Reached() { away_since_.reset(); }  // a call went through

 private:
  const Invocation& c_;
  std::optional<absl::Time> away_since_;
};

// A request that names the command's job.
template <typename Request>
Request ForJob(const Invocation& c) {
  Request r;
  r.set_job_id(JobId(c));
  return r;
}

template <typename Request, typename Response>
using UnaryRpc = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&,
                                        Response*);

// The whole of a unary command after its request is built: calls `rpc`
// with the options' deadline; on failure prints the one error line and
// returns 1; else prints the response (--json: ToJson and a newline;
// otherwise format(response), which ends its own lines) and returns 0.
template <typename Request, typename Response, typename Format>
int CallAndPrint(const Invocation& c, UnaryRpc<Request, Response> rpc,
                 const Request& request, Format format) {
  Response response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + c.options.call_timeout));
  grpc::Status s = (c.stub.*rpc)(&ctx, request, &response);
  if (!s.ok()) return Fail(c, s);
  c.out << (c.flags.json ? ToJson(response) + "\n" : format(response));
  return 0;
}

// CallAndPrint for a paged list RPC: every page, merged (repeated fields
// append), printed once. Stops if a page's token does not move on.
template <typename Request, typename Response, typename Format>
int CallAllPagesAndPrint(const Invocation& c, UnaryRpc<Request, Response> rpc,
                         Request request, Format format) {
  Response all;
  for (int pages = 0;; ++pages) {
    Response page;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + c.options.call_timeout));
    grpc::Status s = (c.stub.*rpc)(&ctx, request, &page);
    if (!s.ok()) return Fail(c, s);
    const std::string next = page.next_page_token();
    all.MergeFrom(page);
    if (next.empty() || next == request.page_token() || pages > 100000) break;
    request.set_page_token(next);
  }
  all.clear_next_page_token();
  c.out << (c.flags.json ? ToJson(all) + "\n" : format(all));
  return 0;
}

// A job spec is a short YAML file: more than this is not one (and a path
// such as /dev/zero would otherwise be read forever).
constexpr std::streamsize kMaxSpecFileBytes = 4 << 20;

int Submit(const Invocation& c) {
  const std::string& path = c.args[0];
  std::ifstream f(path, std::ios::binary);
  if (!f) return Fail(c, "cannot read " + path);
  std::string text(kMaxSpecFileBytes + 1, '\0');
  f.read(text.data(), kMaxSpecFileBytes + 1);
  if (f.bad()) return Fail(c, "cannot read " + path);
  text.resize(f.gcount());
  if (f.gcount() > kMaxSpecFileBytes) {
    return Fail(c, absl::StrCat("job spec ", path, " is larger than 4 MiB: not a job spec"));
  }
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text, path);
  if (!spec.ok()) return Fail(c, spec.status());
  if (c.flags.dry_run) {
    // The coordinator's normalization too: what it would store.
    absl::StatusOr<v1::JobSpec> normal = NormalizeJobSpec(*spec);
    if (!normal.ok()) return Fail(c, normal.status());
    c.out << (c.flags.json ? ToJson(*normal) + "\n"
                           : absl::StrCat(path, " is a valid job spec (not submitted):\n",
                                          FormatSpecSummary(*normal)));
    return 0;
  }
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *std::move(spec);
  return CallAndPrint(c, &Stub::SubmitJob, request,
                      [](const v1::SubmitJobResponse& r) {
                        return r.job_id() + "\n";
                      });
}

int List(const Invocation& c) {
  return CallAllPagesAndPrint(c, &Stub::ListJobs, v1::ListJobsRequest(), FormatJobTable);
}

int Status(const Invocation& c) {
  return CallAndPrint(c, &Stub::GetJob, ForJob<v1::GetJobRequest>(c),
                      FormatJobStatus);
}

// Streams the job's updates until it ends: a line on a change of state or
// generation, otherwise at most one per refresh interval (a log stays
// short); on a terminal one line rewritten in place.
int Watch(const Invocation& c) {
  const bool json = c.flags.json, live = c.options.live;
  const absl::Duration refresh =
      live ? absl::Milliseconds(200) : absl::Seconds(5);
  v1::JobStatus st;
  bool any = false, final_seen = false;
  absl::Time last_print = absl::InfinitePast();
  v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
  int64_t last_generation = -1;
  // One stream: the job's updates until it ends or the stream does.
  // Whether it read anything, and how it ended.
  auto stream = [&](bool* read_any) {
    grpc::ClientContext ctx;
    auto reader = c.stub.WatchJob(&ctx, ForJob<v1::WatchJobRequest>(c));
    while (reader->Read(&st)) {
      *read_any = any = true;
      final_seen = st.state() == v1::SUCCEEDED || st.state() == v1::FAILED ||
                   st.state() == v1::CANCELLED;
      const bool changed =
          st.state() != last_state || st.generation() != last_generation;
      if (json || final_seen || changed || absl::Now() - last_print >= refresh) {
        if (json) {
          c.out << ToJson(st) << "\n";
        } else if (live) {
          c.out << "\r\033[K" << FormatProgress(st);
        } else {
          c.out << FormatProgress(st) << "\n";
        }
        c.out.flush();
        last_print = absl::Now();
        last_state = st.state();
        last_generation = st.generation();
      }
      if (final_seen) break;
    }
    if (final_seen) ctx.TryCancel();
    return reader->Finish();
  };
  // A coordinator restart ends the stream (UNAVAILABLE, or its end before
  // the job's): the job goes on, so the watch reconnects, as long as the
  // coordinator stays away for less than reconnect_for.
  Reconnects reconnects(c);
  grpc::Status s;
  for (;;) {
    bool read_any = false;
    s = stream(&read_any);
    if (final_seen || !reconnects.Again(s, read_any, [&] {
          if (live && any && !json) c.out << "\n";
        }))
      break;
  }
  if (live && any && !json) c.out << "\n";
  if (!final_seen) {
    if (!s.ok()) return Fail(c, s);
    return Fail(c, absl::StrCat("the watch of ", JobId(c),
                                " ended before the job finished"));
  }
  if (st.state() == v1::SUCCEEDED) return 0;
  return Fail(c, absl::StrCat("job ", st.job_id(), " ", StateName(st.state()),
                              st.reason().empty() ? "" : ": " + st.reason()));
}

// One GetLogs call: prints its chunks and notes where each rank's ended.
grpc::Status LogsOnce(const Invocation& c, const v1::GetLogsRequest& request,
                      std::map<std::pair<int, std::string>, bool>* at_line_start_map,
                      std::map<int, int64_t>* ends, bool* read_any) {
  grpc::ClientContext ctx;
  auto reader = c.stub.GetLogs(&ctx, request);
  v1::LogChunk chunk;
  auto& at_line_start = *at_line_start_map;
  while (reader->Read(&chunk)) {
    *read_any = true;
    // Printed already (a coordinator older than rank_offsets sends every
    // rank's log from its start again).
    if (auto e = ends->find(chunk.rank());
        e != ends->end() && chunk.end_offset() > 0 && chunk.end_offset() <= e->second)
      continue;
    (*ends)[chunk.rank()] = chunk.end_offset();
    if (c.flags.json) {
      c.out << ToJson(chunk) << "\n";
    } else if (c.flags.rank >= 0) {
      c.out << chunk.data();
    } else {
      auto [it, inserted] = at_line_start.try_emplace(
          std::make_pair(chunk.rank(), chunk.stream()), true);
      const std::string prefix = absl::StrCat("[rank ", chunk.rank(), "] ");
      for (char ch : chunk.data()) {
        if (it->second) c.out << prefix;
        c.out << ch;
        it->second = ch == '\n';
      }
    }
    c.out.flush();
  }
  return reader->Finish();
}

// One rank: its raw bytes. Every rank: each line prefixed "[rank N] ",
// tracked per (rank, stream) since chunks of several interleave.
// With -f, a coordinator restart (UNAVAILABLE) is followed by a new call
// from where each rank's log was left (its last chunk's end_offset), so
// each byte of the coordinator's log is printed once.
int Logs(const Invocation& c) {
  v1::GetLogsRequest request = ForJob<v1::GetLogsRequest>(c);
  request.set_rank(c.flags.rank);
  request.set_follow(c.flags.follow);
  std::map<std::pair<int, std::string>, bool> at_line_start;
  std::map<int, int64_t> ends;  // each rank's end_offset so far
  Reconnects reconnects(c);
  for (;;) {
    for (const auto& [rank, end] : ends) {
      if (c.flags.rank >= 0) {
        request.set_offset(end);
      } else {
        (*request.mutable_rank_offsets())[rank] = end;
      }
    }
    bool read_any = false;
    grpc::Status s = LogsOnce(c, request, &at_line_start, &ends, &read_any);
    if (s.ok()) return 0;
    if (!c.flags.follow || !reconnects.Again(s, read_any)) return Fail(c, s);
  }
}


int Cancel(const Invocation& c) {
  return CallAndPrint(c, &Stub::CancelJob, ForJob<v1::CancelJobRequest>(c),
                      [&c](const v1::CancelJobResponse& r) {
                        return absl::StrCat("cancelled ", JobId(c), " (",
                                            StateName(r.job().state()), ")\n");
                      });
}

int Checkpoint(const Invocation& c) {
  return CallAndPrint(c, &Stub::RequestCheckpoint,
                      ForJob<v1::RequestCheckpointRequest>(c),
                      [&c](const v1::RequestCheckpointResponse& r) {
                        return absl::StrCat("checkpoint of ", JobId(c),
                                            " requested at step ", r.at_step(),
                                            "\n");
                      });
}

int Checkpoints(const Invocation& c) {
  return CallAndPrint(c, &Stub::ListCheckpoints,
                      ForJob<v1::ListCheckpointsRequest>(c), FormatCheckpoints);
}

// The coordinator's copy of a checkpoint, written to FILE (default
// ./<job>-ckpt-<step>.pt) once whole and its size and checksum match.
int Download(const Invocation& c) {
  v1::GetCheckpointRequest request = ForJob<v1::GetCheckpointRequest>(c);
  request.set_step(c.flags.step);
  grpc::ClientContext ctx;
  auto reader = c.stub.GetCheckpoint(&ctx, request);
  v1::CheckpointData chunk;
  std::unique_ptr<ReceivedFile> file;
  std::string path, checksum;
  int64_t step = 0;
  while (reader->Read(&chunk)) {
    if (!file) {
      step = chunk.step();
      checksum = chunk.checksum();
      path = c.args.size() > 1 ? c.args[1] : absl::StrCat(JobId(c), "-ckpt-", step, ".pt");
      // The user's own disk: no margin kept for daemons.
      auto created = ReceivedFile::Create(path, chunk.total_bytes(), /*keep_free=*/0);
      if (!created.ok()) {
        ctx.TryCancel();
        (void)reader->Finish();
        return Fail(c, created.status());
      }
      file = std::move(*created);
    }
    if (absl::Status s = file->Append(chunk.data()); !s.ok()) {
      ctx.TryCancel();
      (void)reader->Finish();
      return Fail(c, s);
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail(c, s);
  if (!file) return Fail(c, "the coordinator sent no data");
  if (absl::Status done = file->Commit(checksum); !done.ok()) return Fail(c, done);
  c.out << "checkpoint of step " << step << " of " << JobId(c) << " written to " << path << " ("
        << file->received() << " bytes, " << checksum << ")\n";
  return 0;
}

// Asks for the stacks of a rank (--rank N) or every rank, then prints each
// rank's block from its log once the worker has put it there (up to 20 s).
int Debug(const Invocation& c) {
  v1::DebugJobRequest request = ForJob<v1::DebugJobRequest>(c);
  request.set_rank(c.flags.rank);
  v1::DebugJobResponse asked;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + c.options.call_timeout));
    grpc::Status s = c.stub.DebugJob(&ctx, request, &asked);
    if (!s.ok()) return Fail(c, s);
  }
  const std::string end = "=== frameworm: end of stacks ===\n";
  std::map<int, std::string> found;
  // Per rank: what was read of its log, and the offset to go on from (each
  // poll reads only what was appended since the last).
  std::map<int, std::string> texts;
  std::map<int, int64_t> next;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (found.size() < static_cast<size_t>(asked.ranks_size()) && absl::Now() < deadline) {
    for (int r : asked.ranks()) {
      if (found.count(r)) continue;
      v1::GetLogsRequest logs = ForJob<v1::GetLogsRequest>(c);
      logs.set_rank(r);
      logs.set_offset(next[r]);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + c.options.call_timeout));
      auto reader = c.stub.GetLogs(&ctx, logs);
      v1::LogChunk chunk;
      std::string& text = texts[r];
      while (reader->Read(&chunk)) {
        text += chunk.data();
        next[r] = std::max(next[r], chunk.end_offset());
      }
      (void)reader->Finish();
      const std::string head = absl::StrCat(" generation ", asked.generation(), " rank ", r, " (",
                                            asked.marker(), ")");
      const size_t at = text.find(head);
      const size_t start = at == std::string::npos ? at : text.rfind("=== frameworm: stacks", at);
      const size_t stop = start == std::string::npos ? start : text.find(end, at);
      if (stop != std::string::npos) found[r] = text.substr(start, stop + end.size() - start);
    }
    if (found.size() < static_cast<size_t>(asked.ranks_size())) absl::SleepFor(absl::Milliseconds(500));
  }
  c.out << FormatRecorders(asked);
  for (const auto& [r, block] : found) c.out << block;
  for (int r : asked.ranks()) {
    if (!found.count(r)) {
      return Fail(c, absl::StrCat("no stacks from rank ", r, " within 20s (its worker may be "
                                  "unreachable; they go to its log when they come)"));
    }
  }
  return 0;
}

int Metrics(const Invocation& c) {
  v1::GetMetricsRequest request = ForJob<v1::GetMetricsRequest>(c);
  request.set_since_step(c.flags.since);
  return CallAllPagesAndPrint(c, &Stub::GetMetrics, request,
                              c.flags.csv ? FormatMetricsCsv : FormatMetricsTable);
}

// Every event after the last one printed, page after page until nothing
// is new; with -f, then asks again every second (200 ms on a terminal)
// until the job's job_finished event (for a job) or for ever (every event).
int Events(const Invocation& c) {
  v1::ListEventsRequest request;
  if (!c.args.empty()) request.set_job_id(c.args[0]);
  const absl::Duration poll =
      c.options.live ? absl::Milliseconds(200) : absl::Seconds(1);
  Reconnects reconnects(c);  // -f: across a coordinator restart
  for (;;) {
    v1::ListEventsResponse page;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + c.options.call_timeout));
    grpc::Status s = c.stub.ListEvents(&ctx, request, &page);
    if (!s.ok()) {
      if (c.flags.follow && reconnects.Again(s, false)) continue;
      return Fail(c, s);
    }
    reconnects.Reached();
    bool finished = false;
    if (c.flags.json) {
      for (const auto& e : page.events()) c.out << ToJson(e) << "\n";
    } else {
      c.out << FormatEvents(page);
    }
    for (const auto& e : page.events()) finished |= e.kind() == "job_finished";
    c.out.flush();
    const bool moved = page.next_after_seq() > request.after_seq();
    request.set_after_seq(page.next_after_seq());
    if (moved && !finished) continue;  // there may be more: ask until nothing is new
    if (!c.flags.follow || (finished && !request.job_id().empty())) return 0;
    absl::SleepFor(poll);
  }
}

int Workers(const Invocation& c) {
  return CallAllPagesAndPrint(c, &Stub::ListWorkers, v1::ListWorkersRequest(), FormatWorkers);
}

constexpr Command kCommands[] = {
    {"submit", Submit, 1, "one job file", "submit JOB.yaml",
     "submit a job, print its id (--dry-run: check it,\nprint what it would run, submit nothing)"},
    {"list", List, 0, "no arguments", "list", "jobs"},
    {"status", Status, 1, "one job id", "status ID", "one job"},
    {"watch", Watch, 1, "one job id", "watch ID",
     "live progress until the job ends\n(exit 0 only if it SUCCEEDED)"},
    {"logs", Logs, 1, "one job id", "logs ID [--rank N] [-f]",
     "trainer logs (-f: follow)"},
    {"cancel", Cancel, 1, "one job id", "cancel ID", "cancel a job"},
    {"checkpoint", Checkpoint, 1, "one job id", "checkpoint ID",
     "request a checkpoint now"},
    {"checkpoints", Checkpoints, 1, "one job id", "checkpoints ID",
     "the checkpoint catalog of a job"},
    {"debug", Debug, 1, "one job id", "debug ID [--rank N]",
     "stack traces of every thread of a running rank\n(or of every rank), also kept in its log"},
    {"download", Download, 1, "a job id and at most one file", "download ID [FILE] [--step N]",
     "a copy of a job's checkpoint (the newest; --step N:\nthat one), size and CRC checked", 2},
    {"metrics", Metrics, 1, "one job id", "metrics ID [--json|--csv]",
     "per-step aggregated metrics"},
    {"workers", Workers, 0, "no arguments", "workers", "registered workers"},
    {"events", Events, 0, "at most one job id", "events [ID] [-f]",
     "lifecycle events of a job, or of the cluster\n(-f: follow; for a job, until it ends)", 1},
    {"admin", Admin, 2, "'ca init' or 'ca issue'", "admin ca init|issue",
     "the cluster CA: init --ca-dir D; issue --ca-dir D\n"
     "--role coordinator|worker|user|admin --name N [--out DIR]"},
};

}  // namespace

absl::Span<const Command> Commands() { return kCommands; }

}  // namespace frameworm
