#include "client/cli.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "frameworm/v1/job_service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "jobspec/job_spec.h"
#include "rpc/rpc.h"

namespace frameworm {
namespace {

constexpr char kUsage[] =
    "usage: frameworm-cli [--coordinator HOST:PORT] <command> [args]\n"
    "commands:\n"
    "  submit JOB.yaml              submit a job, print its id\n"
    "  list                         jobs\n"
    "  status ID                    one job\n"
    "  watch ID                     live progress until the job ends\n"
    "                               (exit 0 only if it SUCCEEDED)\n"
    "  logs ID [--rank N] [-f]      trainer logs (-f: follow)\n"
    "  cancel ID                    cancel a job\n"
    "  checkpoint ID                request a checkpoint now\n"
    "  checkpoints ID               the checkpoint catalog of a job\n"
    "  metrics ID [--json|--csv]    per-step aggregated metrics\n"
    "  workers                      registered workers\n"
    "--json prints the response as JSON (every read command).\n"
    "--coordinator defaults to $FRAMEWORM_COORDINATOR or 127.0.0.1:7070.\n";

std::string Pad(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows) {
    if (w.size() < r.size()) w.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string TimeText(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::LocalTimeZone());
}

std::string Num(double v) { return absl::StrFormat("%.4g", v); }

struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::string coordinator;
  bool json = false, csv = false, follow = false;
  int rank = -1;
  bool rank_set = false;
  int64_t since = 0;
};

// Returns an error message for a usage error.
std::string Parse(const std::vector<std::string>& in, Args* a) {
  for (size_t i = 0; i < in.size(); ++i) {
    std::string s = in[i];
    std::string value;
    bool has_value = false;
    if (s.rfind("--", 0) == 0 && s.find('=') != std::string::npos) {
      value = s.substr(s.find('=') + 1);
      s = s.substr(0, s.find('='));
      has_value = true;
    }
    auto take = [&](std::string* v) -> bool {
      if (has_value) {
        *v = value;
        return true;
      }
      if (i + 1 >= in.size()) return false;
      *v = in[++i];
      return true;
    };
    if (s == "--coordinator") {
      if (!take(&a->coordinator) || a->coordinator.empty()) {
        return "--coordinator needs HOST:PORT";
      }
    } else if (s == "--json") {
      a->json = true;
    } else if (s == "--csv") {
      a->csv = true;
    } else if (s == "-f" || s == "--follow") {
      a->follow = true;
    } else if (s == "--rank") {
      std::string v;
      if (!take(&v) || !absl::SimpleAtoi(v, &a->rank) || a->rank < 0) {
        return "--rank needs a rank number >= 0";
      }
      a->rank_set = true;
    } else if (s == "--since") {
      std::string v;
      if (!take(&v) || !absl::SimpleAtoi(v, &a->since) || a->since < 0) {
        return "--since needs a step number >= 0";
      }
    } else if (s.size() > 1 && s[0] == '-') {
      return "unknown flag " + s;
    } else if (a->command.empty()) {
      a->command = s;
    } else {
      a->positional.push_back(s);
    }
  }
  if (a->command.empty()) return "no command given";
  static const std::map<std::string, int> kArity = {
      {"submit", 1},  {"list", 0},       {"status", 1},      {"watch", 1},
      {"logs", 1},    {"cancel", 1},     {"checkpoint", 1},  {"checkpoints", 1},
      {"metrics", 1}, {"workers", 0}};
  auto it = kArity.find(a->command);
  if (it == kArity.end()) return "unknown command '" + a->command + "'";
  if (static_cast<int>(a->positional.size()) != it->second) {
    return absl::StrCat(a->command, " takes ",
                        it->second == 0 ? "no arguments"
                        : a->command == "submit" ? "one job file"
                                                 : "one job id",
                        ", got ", a->positional.size());
  }
  if (a->csv && a->command != "metrics") return "--csv applies to metrics only";
  if (a->json && a->csv) return "--json and --csv exclude each other";
  if ((a->rank_set || a->follow) && a->command != "logs") {
    return "--rank and -f apply to logs only";
  }
  return "";
}

class Cli {
 public:
  Cli(const Args& a, const CliOptions& o, std::ostream& out, std::ostream& err)
      : a_(a),
        o_(o),
        out_(out),
        err_(err),
        stub_(v1::JobService::NewStub(MakeChannel(
            a.coordinator.empty() ? o.default_coordinator : a.coordinator))) {}

  int Run() {
    const std::string& c = a_.command;
    if (c == "submit") return Submit();
    if (c == "list") return List();
    if (c == "status") return Status();
    if (c == "watch") return Watch();
    if (c == "logs") return Logs();
    if (c == "cancel") return Cancel();
    if (c == "checkpoint") return Checkpoint();
    if (c == "checkpoints") return Checkpoints();
    if (c == "metrics") return Metrics();
    return Workers();
  }

 private:
  int Fail(const grpc::Status& s) {
    std::string code = absl::StatusCodeToString(
        static_cast<absl::StatusCode>(s.error_code()));
    err_ << "frameworm-cli: " << a_.command << ": " << code << ": "
         << s.error_message() << "\n";
    return 1;
  }
  int Fail(const std::string& msg) {
    err_ << "frameworm-cli: " << a_.command << ": " << msg << "\n";
    return 1;
  }
  void Unary(grpc::ClientContext* ctx) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + o_.call_timeout));
  }
  const std::string& Id() const { return a_.positional[0]; }

  int Submit() {
    std::ifstream f(a_.positional[0], std::ios::binary);
    if (!f) return Fail("cannot read " + a_.positional[0]);
    std::stringstream ss;
    ss << f.rdbuf();
    auto spec = ParseJobSpecYaml(ss.str(), a_.positional[0]);
    if (!spec.ok()) {
      return Fail(absl::StrCat("INVALID_ARGUMENT: ", spec.status().message()));
    }
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    out_ << (a_.json ? ToJson(resp) : resp.job_id()) << "\n";
    return 0;
  }

  int List() {
    v1::ListJobsResponse resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->ListJobs(&ctx, {}, &resp);
    if (!s.ok()) return Fail(s);
    out_ << (a_.json ? ToJson(resp) + "\n" : FormatJobTable(resp));
    return 0;
  }

  int Status() {
    v1::GetJobRequest req;
    req.set_job_id(Id());
    v1::JobStatus resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->GetJob(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    out_ << (a_.json ? ToJson(resp) + "\n" : FormatJobStatus(resp));
    return 0;
  }

  int Watch() {
    v1::WatchJobRequest req;
    req.set_job_id(Id());
    grpc::ClientContext ctx;
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobStatus st;
    bool any = false;
    bool final_seen = false;
    // Updates come once per step; a line is printed on a change of state or
    // generation, and otherwise at most every kRefresh (a log stays short).
    const absl::Duration kRefresh =
        o_.live ? absl::Milliseconds(200) : absl::Seconds(5);
    absl::Time last_print = absl::InfinitePast();
    v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
    int64_t last_generation = -1;
    while (reader->Read(&st)) {
      any = true;
      final_seen = st.state() == v1::SUCCEEDED || st.state() == v1::FAILED ||
                   st.state() == v1::CANCELLED;
      const bool changed =
          st.state() != last_state || st.generation() != last_generation;
      if (a_.json || final_seen || changed ||
          absl::Now() - last_print >= kRefresh) {
        if (a_.json) {
          out_ << ToJson(st) << "\n";
        } else if (o_.live) {
          out_ << "\r\033[K" << FormatProgress(st);
        } else {
          out_ << FormatProgress(st) << "\n";
        }
        out_.flush();
        last_print = absl::Now();
        last_state = st.state();
        last_generation = st.generation();
      }
      if (final_seen) break;
    }
    if (final_seen) ctx.TryCancel();
    grpc::Status s = reader->Finish();
    if (o_.live && any && !a_.json) out_ << "\n";
    if (!final_seen) {
      if (!s.ok()) return Fail(s);
      return Fail(absl::StrCat("the watch of ", Id(),
                               " ended before the job finished"));
    }
    if (st.state() == v1::SUCCEEDED) return 0;
    return Fail(absl::StrCat("job ", st.job_id(), " ", StateName(st.state()),
                             st.reason().empty() ? "" : ": " + st.reason()));
  }

  int Logs() {
    v1::GetLogsRequest req;
    req.set_job_id(Id());
    req.set_rank(a_.rank_set ? a_.rank : -1);
    req.set_follow(a_.follow);
    grpc::ClientContext ctx;
    auto reader = stub_->GetLogs(&ctx, req);
    v1::LogChunk chunk;
    std::map<std::pair<int, std::string>, bool> at_line_start;
    while (reader->Read(&chunk)) {
      if (a_.json) {
        out_ << ToJson(chunk) << "\n";
      } else if (a_.rank_set) {
        out_ << chunk.data();
      } else {
        auto key = std::make_pair(chunk.rank(), chunk.stream());
        auto [it, inserted] = at_line_start.try_emplace(key, true);
        std::string prefix = absl::StrCat("[rank ", chunk.rank(), "] ");
        for (char ch : chunk.data()) {
          if (it->second) out_ << prefix;
          out_ << ch;
          it->second = ch == '\n';
        }
      }
      out_.flush();
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return Fail(s);
    return 0;
  }

  int Cancel() {
    v1::CancelJobRequest req;
    req.set_job_id(Id());
    v1::CancelJobResponse resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->CancelJob(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    if (a_.json) {
      out_ << ToJson(resp) << "\n";
    } else {
      out_ << "cancelled " << Id() << " (" << StateName(resp.job().state())
           << ")\n";
    }
    return 0;
  }

  int Checkpoint() {
    v1::RequestCheckpointRequest req;
    req.set_job_id(Id());
    v1::RequestCheckpointResponse resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->RequestCheckpoint(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    if (a_.json) {
      out_ << ToJson(resp) << "\n";
    } else {
      out_ << "checkpoint of " << Id() << " requested at step " << resp.at_step()
           << "\n";
    }
    return 0;
  }

  int Checkpoints() {
    v1::ListCheckpointsRequest req;
    req.set_job_id(Id());
    v1::ListCheckpointsResponse resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->ListCheckpoints(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    out_ << (a_.json ? ToJson(resp) + "\n" : FormatCheckpoints(resp));
    return 0;
  }

  int Metrics() {
    v1::GetMetricsRequest req;
    req.set_job_id(Id());
    req.set_since_step(a_.since);
    v1::GetMetricsResponse resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->GetMetrics(&ctx, req, &resp);
    if (!s.ok()) return Fail(s);
    out_ << (a_.json  ? ToJson(resp) + "\n"
             : a_.csv ? FormatMetricsCsv(resp)
                      : FormatMetricsTable(resp));
    return 0;
  }

  int Workers() {
    v1::ListWorkersResponse resp;
    grpc::ClientContext ctx;
    Unary(&ctx);
    grpc::Status s = stub_->ListWorkers(&ctx, {}, &resp);
    if (!s.ok()) return Fail(s);
    out_ << (a_.json ? ToJson(resp) + "\n" : FormatWorkers(resp));
    return 0;
  }

  const Args& a_;
  const CliOptions& o_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace

std::string StateName(v1::JobState s) {
  switch (s) {
    case v1::PENDING: return "PENDING";
    case v1::RUNNING: return "RUNNING";
    case v1::RESTARTING: return "RESTARTING";
    case v1::SUCCEEDED: return "SUCCEEDED";
    case v1::FAILED: return "FAILED";
    case v1::CANCELLED: return "CANCELLED";
    default: return "UNKNOWN";
  }
}

std::string HumanDuration(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 0) s = 0;
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string FormatProgress(const v1::JobStatus& j) {
  std::string line = absl::StrCat(j.job_id(), " ", StateName(j.state()));
  if (j.generation() > 0) absl::StrAppend(&line, " gen ", j.generation());
  int64_t total = j.total_steps();
  absl::StrAppend(&line, " step ", j.step());
  if (total > 0) {
    absl::StrAppend(&line, "/", total,
                    absl::StrFormat(" (%d%%)", std::min<int64_t>(
                                                   100, j.step() * 100 / total)));
  }
  auto loss = j.last().mean().find("loss");
  if (loss != j.last().mean().end()) {
    absl::StrAppend(&line, " loss ", absl::StrFormat("%.4f", loss->second));
  }
  if (j.samples_per_second() > 0) {
    absl::StrAppend(&line, " ", absl::StrFormat("%.1f", j.samples_per_second()),
                    " samples/s");
  }
  if (j.state() == v1::RUNNING || j.state() == v1::RESTARTING) {
    double steps_per_s = j.last().samples() > 0
                             ? j.samples_per_second() / j.last().samples()
                             : 0;
    if (total > 0 && steps_per_s > 0 && j.step() <= total) {
      absl::StrAppend(&line, " ETA ",
                      HumanDuration(absl::Seconds((total - j.step()) / steps_per_s)));
    } else {
      absl::StrAppend(&line, " ETA --");
    }
  }
  if (j.restarts() > 0) absl::StrAppend(&line, " restarts ", j.restarts());
  if (!j.last().stragglers().empty()) {
    absl::StrAppend(&line, " stragglers [", absl::StrJoin(j.last().stragglers(), ","),
                    "]");
  }
  if (!j.reason().empty() && j.state() != v1::RUNNING) {
    absl::StrAppend(&line, ": ", j.reason());
  }
  return line;
}

std::string FormatJobTable(const v1::ListJobsResponse& r) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "GEN", "RESTARTS", "STEP", "WORKERS"}};
  for (const auto& j : r.jobs()) {
    std::string step = absl::StrCat(j.step());
    if (j.total_steps() > 0) absl::StrAppend(&step, "/", j.total_steps());
    rows.push_back({j.job_id(), j.spec().name(), StateName(j.state()),
                    absl::StrCat(j.generation()), absl::StrCat(j.restarts()), step,
                    j.workers().empty() ? "-" : absl::StrJoin(j.workers(), ",")});
  }
  return Pad(rows);
}

std::string FormatJobStatus(const v1::JobStatus& j) {
  std::string o;
  auto kv = [&](const std::string& k, const std::string& v) {
    absl::StrAppend(&o, k, ": ", v, "\n");
  };
  kv("id", j.job_id());
  kv("name", j.spec().name());
  kv("state", StateName(j.state()));
  if (!j.reason().empty()) kv("reason", j.reason());
  kv("generation", absl::StrCat(j.generation()));
  kv("restarts", absl::StrCat(j.restarts(), "/", j.spec().max_restarts()));
  kv("step", j.total_steps() > 0
                 ? absl::StrCat(j.step(), "/", j.total_steps())
                 : absl::StrCat(j.step()));
  kv("ranks", absl::StrCat(j.spec().nodes_max(), " node(s) x ",
                           j.spec().nproc_per_node(), " process(es)"));
  kv("workers", j.workers().empty() ? "-" : absl::StrJoin(j.workers(), ", "));
  std::map<std::string, double> mean(j.last().mean().begin(), j.last().mean().end());
  for (const auto& [k, v] : mean) kv(k, Num(v));
  if (j.samples_per_second() > 0) {
    kv("samples/s", absl::StrFormat("%.1f", j.samples_per_second()));
  }
  kv("submitted", TimeText(j.submitted_unix_ms()));
  kv("started", TimeText(j.started_unix_ms()));
  kv("finished", TimeText(j.finished_unix_ms()));
  if (!j.log_dir().empty()) kv("logs", j.log_dir());
  return o;
}

std::string FormatCheckpoints(const v1::ListCheckpointsResponse& r) {
  std::vector<std::vector<std::string>> rows = {
      {"STEP", "PATH", "BYTES", "CHECKSUM", "CREATED"}};
  for (const auto& c : r.checkpoints()) {
    rows.push_back({absl::StrCat(c.step()), c.path(), absl::StrCat(c.bytes()),
                    c.checksum(), TimeText(c.created_unix_ms())});
  }
  return Pad(rows);
}

namespace {
std::vector<std::string> MetricKeys(const v1::GetMetricsResponse& r) {
  std::set<std::string> keys;
  for (const auto& s : r.steps()) {
    for (const auto& [k, v] : s.mean()) keys.insert(k);
  }
  return {keys.begin(), keys.end()};
}
}  // namespace

std::string FormatMetricsTable(const v1::GetMetricsResponse& r) {
  auto keys = MetricKeys(r);
  std::vector<std::string> head = {"STEP", "EPOCH", "RANKS", "SAMPLES"};
  for (const auto& k : keys) head.push_back(k);
  head.push_back("STRAGGLERS");
  std::vector<std::vector<std::string>> rows = {head};
  for (const auto& s : r.steps()) {
    std::vector<std::string> row = {absl::StrCat(s.step()), absl::StrCat(s.epoch()),
                                    absl::StrCat(s.ranks_reported()),
                                    absl::StrCat(s.samples())};
    for (const auto& k : keys) {
      auto it = s.mean().find(k);
      row.push_back(it == s.mean().end() ? "-" : Num(it->second));
    }
    row.push_back(s.stragglers().empty() ? "-" : absl::StrJoin(s.stragglers(), ","));
    rows.push_back(row);
  }
  return Pad(rows);
}

std::string FormatMetricsCsv(const v1::GetMetricsResponse& r) {
  auto keys = MetricKeys(r);
  std::string o = "step,epoch,ranks_reported,samples";
  for (const auto& k : keys) absl::StrAppend(&o, ",", k);
  absl::StrAppend(&o, ",stragglers\n");
  for (const auto& s : r.steps()) {
    absl::StrAppend(&o, s.step(), ",", s.epoch(), ",", s.ranks_reported(), ",",
                    s.samples());
    for (const auto& k : keys) {
      auto it = s.mean().find(k);
      absl::StrAppend(&o, ",",
                      it == s.mean().end() ? "" : absl::StrFormat("%.9g", it->second));
    }
    absl::StrAppend(&o, ",", absl::StrJoin(s.stragglers(), " "), "\n");
  }
  return o;
}

std::string FormatWorkers(const v1::ListWorkersResponse& r) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "ADDRESS", "SLOTS", "FREE", "ALIVE", "LAST_HEARTBEAT", "TASKS"}};
  for (const auto& w : r.workers()) {
    rows.push_back({w.name(), w.address(), absl::StrCat(w.slots()),
                    absl::StrCat(w.free_slots()), w.alive() ? "yes" : "no",
                    TimeText(w.last_heartbeat_unix_ms()),
                    w.running_tasks().empty() ? "-"
                                              : absl::StrJoin(w.running_tasks(), ",")});
  }
  return Pad(rows);
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

int RunCli(const std::vector<std::string>& args, const CliOptions& options,
           std::ostream& out, std::ostream& err) {
  Args a;
  for (const auto& s : args) {
    if (s == "-h" || s == "--help" || s == "help") {
      out << kUsage;
      return 0;
    }
  }
  std::string usage_error = Parse(args, &a);
  if (!usage_error.empty()) {
    err << "frameworm-cli: " << usage_error << "\n" << kUsage;
    return 2;
  }
  Cli cli(a, options, out, err);
  return cli.Run();
}

}  // namespace frameworm
