#include "client/cli_format.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/collective_text.h"
#include "common/printable.h"
#include "google/protobuf/util/json_util.h"

namespace frameworm {
namespace {

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

std::vector<std::string> MetricKeys(const v1::GetMetricsResponse& r) {
  std::set<std::string> keys;
  for (const auto& s : r.steps()) {
    for (const auto& [k, v] : s.mean()) keys.insert(k);
  }
  return {keys.begin(), keys.end()};
}

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
  if (!j.warning().empty()) kv("warning", j.warning());
  if (!j.last_cause().empty()) {
    kv("last cause", absl::StrCat(j.last_cause(), " (", TimeText(j.last_cause_unix_ms()), ")"));
  }
  kv("generation", absl::StrCat(j.generation()));
  kv("restarts", absl::StrCat(j.restarts(), "/", j.spec().max_restarts()));
  kv("step", j.total_steps() > 0
                 ? absl::StrCat(j.step(), "/", j.total_steps())
                 : absl::StrCat(j.step()));
  // An elastic job: the nodes it runs on now, of its range.
  const std::string nodes =
      j.spec().nodes_min() == j.spec().nodes_max() || j.spec().nodes_min() == 0
          ? absl::StrCat(j.spec().nodes_max())
          : j.workers().empty()
                ? absl::StrCat(j.spec().nodes_min(), "..", j.spec().nodes_max())
                : absl::StrCat(j.workers_size(), " (of ", j.spec().nodes_min(), "..",
                               j.spec().nodes_max(), ")");
  kv("ranks", absl::StrCat(nodes, " node(s) x ", j.spec().nproc_per_node(), " process(es)"));
  kv("workers", j.workers().empty() ? "-" : absl::StrJoin(j.workers(), ", "));
  std::map<std::string, double> mean(j.last().mean().begin(), j.last().mean().end());
  for (const auto& [k, v] : mean) kv(k, Num(v));
  if (!j.last().stragglers().empty()) {
    kv("stragglers", absl::StrCat("rank(s) ", absl::StrJoin(j.last().stragglers(), ", "),
                                  " at step ", j.last().step()));
  }
  if (j.samples_per_second() > 0) {
    kv("samples/s", absl::StrFormat("%.1f", j.samples_per_second()));
  }
  kv("submitted", TimeText(j.submitted_unix_ms()));
  kv("started", TimeText(j.started_unix_ms()));
  kv("finished", TimeText(j.finished_unix_ms()));
  if (!j.log_dir().empty()) kv("logs", j.log_dir());
  if (!j.tensorboard_dir().empty()) kv("tensorboard", j.tensorboard_dir());
  return o;
}

std::string FormatEvents(const v1::ListEventsResponse& r) {
  std::string out;
  for (const auto& e : r.events()) {
    absl::StrAppend(&out, absl::StrFormat("%s  %-18s  %s\n", TimeText(e.unix_ms()), e.kind(),
                                          e.message()));
  }
  return out;
}

std::string FormatRecorders(const v1::DebugJobResponse& r) {
  if (r.recorders().empty() && r.collectives().empty()) return "";
  std::string out = "=== frameworm: flight recorders (as of each rank's last ping) ===\n";
  for (const auto& rank : r.recorders()) {
    const auto& c = rank.collectives();
    absl::StrAppend(&out, absl::StrFormat("rank %d (its ping %.1f s ago): issued #%d, completed #%d\n",
                                          rank.rank(), rank.ping_age_seconds(), c.enqueued(),
                                          c.completed()));
    for (const auto& op : c.recent()) {
      absl::StrAppend(&out, "  ", CollectiveText(op.seq(), op.op(), op.what(), op.bucket(), op.bytes()),
                      " ", op.state());
      if (op.seconds() > 0) {
        absl::StrAppend(&out, absl::StrFormat(", took %.3f s", op.seconds()));
      } else {
        absl::StrAppend(&out, absl::StrFormat(", enqueued %.3f s before", op.age_seconds()));
      }
      absl::StrAppend(&out, "\n");
    }
  }
  if (!r.collectives().empty()) absl::StrAppend(&out, r.collectives(), "\n");
  return out;
}

std::string FormatCheckpoints(const v1::ListCheckpointsResponse& r) {
  std::vector<std::vector<std::string>> rows = {
      {"STEP", "KIND", "PATH", "BYTES", "CHECKSUM", "CREATED", "HELD_BY"}};
  for (const auto& c : r.checkpoints()) {
    // The coordinator's strings, shown as printable text whatever a peer sent.
    const std::string held =
        c.holders().empty() ? "-" : PrintableLine(absl::StrJoin(c.holders(), ","), 4096);
    rows.push_back({absl::StrCat(c.step()), c.memory() ? "memory" : "disk",
                    PrintableLine(c.path(), 4096), absl::StrCat(c.bytes()),
                    PrintableLine(c.checksum(), 64), TimeText(c.created_unix_ms()), held});
  }
  return Pad(rows);
}

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

std::string FormatSpecSummary(const v1::JobSpec& spec) {
  std::string out = absl::StrCat("name: ", spec.name(), "\n");
  absl::StrAppend(&out, "nodes: ", spec.nodes_min(),
                  spec.nodes_max() > spec.nodes_min() ? absl::StrCat(" to ", spec.nodes_max()) : "",
                  " x ", spec.nproc_per_node(), " process", spec.nproc_per_node() == 1 ? "" : "es",
                  " per node\n");
  absl::StrAppend(&out, "backend: ",
                  spec.backend().empty() ? "nccl where a node has GPUs, else gloo" : spec.backend(),
                  "\n");
  std::vector<std::string> command(spec.entrypoint().begin(), spec.entrypoint().end());
  if (command.empty()) command.push_back("frameworm-train");
  absl::StrAppend(&out, "command: ", absl::StrJoin(command, " "), "\n");
  if (!spec.train_options().empty()) {
    const std::map<std::string, std::string> sorted(spec.train_options().begin(),
                                                    spec.train_options().end());
    absl::StrAppend(&out, "train:",
                    absl::StrJoin(sorted, "", [](std::string* o, const auto& kv) {
                      absl::StrAppend(o, " --", kv.first, "=", kv.second);
                    }),
                    "\n");
  }
  absl::StrAppend(&out, "max_restarts: ", spec.max_restarts(), "\n");
  if (spec.total_steps() > 0) absl::StrAppend(&out, "total_steps: ", spec.total_steps(), "\n");
  return out;
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

}  // namespace frameworm
