// P4 breakdown: where a ReportStep's server time goes, without gRPC.
//
// In one process (no network), against a real Coordinator core with its
// real SQLite store in a fresh directory: K registered and attached
// workers, a RUNNING job on them, then single-threaded timings of
//   core.ReportStep        the whole core call (lock, aggregate, store),
//                          mean and slowest single call
//   core.Heartbeat         HandleWorkerMessage(heartbeat)
//   aggregator.Add         MetricAggregator::Add alone
//   store.PutMetric        Store::PutMetric alone (one autocommit INSERT),
//                          mean and slowest single call
// and, on a scratch database with the same schema and pragmas, raw SQLite
// variants of the metric insert that a fix could use:
//   sqlite.prepare_each    prepare + bind + step + finalize, autocommit
//                          (what Store does today)
//   sqlite.cached_stmt     one prepared statement reused, autocommit
//   sqlite.batch100        cached statement, 100 inserts per transaction
// Prints one JSON line with microseconds per operation.
//
// usage: p4_core_bench [--workers=8] [--ops=20000]
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/sqlite_store.h"

namespace fc = frameworm::coordinator;
namespace v1 = frameworm::v1;
namespace fs = std::filesystem;

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "p4_core_bench: %s\n", msg.c_str());
  return 1;
}

// Microseconds per call of fn(i) for i in [0, ops); the slowest single
// call's microseconds go to *max_us when given.
double Time(int ops, const std::function<bool(int)>& fn,
            double* max_us = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  auto prev = t0;
  double worst = 0;
  for (int i = 0; i < ops; ++i) {
    if (!fn(i)) return -1;
    if (max_us) {
      const auto now = std::chrono::steady_clock::now();
      worst = std::max(
          worst, std::chrono::duration<double, std::micro>(now - prev).count());
      prev = now;
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  if (max_us) *max_us = worst;
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / ops;
}

// `tokens`: each rank's FRAMEWORM_TOKEN (from its StartTask).
v1::StepMetrics Report(const v1::JobRef& ref, const std::vector<std::string>& tokens, int rank,
                       int64_t step) {
  v1::StepMetrics m;
  *m.mutable_ref() = ref;
  m.mutable_ref()->set_token(tokens[rank]);
  m.set_rank(rank);
  m.set_step(step);
  m.set_samples(32);
  m.set_step_seconds(0.01);
  (*m.mutable_values())["loss"] = 1.0 / (1 + step);
  (*m.mutable_values())["accuracy"] = 0.5;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 8, ops = 20000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--workers=", 0) == 0 && absl::SimpleAtoi(a.substr(10), &workers) &&
        workers > 0)
      continue;
    if (a.rfind("--ops=", 0) == 0 && absl::SimpleAtoi(a.substr(6), &ops) && ops > 0)
      continue;
    return Fail(absl::StrCat("bad argument '", a,
                             "' (flags: --workers=K>0 --ops=N>0)"));
  }
  char tmpl[] = "/tmp/frameworm-p4core-XXXXXX";
  if (!mkdtemp(tmpl)) return Fail("mkdtemp failed");
  const std::string dir = tmpl;
  std::string json;
  {
    fc::CoordinatorOptions o;
    o.state_dir = (fs::path(dir) / "state").string();
    o.default_heartbeat_timeout = absl::Seconds(600);
    auto core = fc::Coordinator::Create(o, frameworm::RealClock::Real());
    if (!core.ok()) return Fail(core.status().ToString());
    std::vector<std::string> sessions;
    for (int w = 0; w < workers; ++w) {
      v1::RegisterWorkerRequest r;
      r.set_name(absl::StrFormat("sim-%05d", w));
      r.set_address("127.0.0.1");
      r.set_slots(1);
      auto reg = (*core)->RegisterWorker(r);
      if (!reg.ok()) return Fail(reg.status().ToString());
      if (auto s = (*core)->AttachSession(reg->session_id); !s.ok())
        return Fail(s.ToString());
      sessions.push_back(reg->session_id);
    }
    v1::JobSpec spec;
    spec.set_name("p4-core");
    spec.add_entrypoint("/bin/true");
    spec.set_nodes_min(workers);
    spec.set_nodes_max(workers);
    spec.set_nproc_per_node(1);
    auto id = (*core)->SubmitJob(spec);
    if (!id.ok()) return Fail(id.status().ToString());
    auto job = (*core)->GetJob(*id);
    if (!job.ok() || job->state() != v1::RUNNING)
      return Fail("the job did not start on the simulated workers");
    v1::JobRef ref;
    ref.set_job_id(*id);
    ref.set_generation(job->generation());
    // Each rank's token, as its trainer would get it from the StartTask.
    std::vector<std::string> tokens(workers);
    for (const std::string& session : sessions) {
      auto cmds = (*core)->TakeCommands(session);
      if (!cmds.ok()) return Fail(cmds.status().ToString());
      for (const auto& c : *cmds) {
        if (c.has_start() && c.start().task().rank() < workers)
          tokens[c.start().task().rank()] = c.start().task().token();
      }
    }

    double report_max_us = 0, put_max_us = 0;
    const double report_us = Time(
        ops,
        [&](int i) {
          return (*core)
              ->ReportStep(Report(ref, tokens, i % workers, 1 + i / workers))
              .ok();
        },
        &report_max_us);
    v1::WorkerMessage hb;
    hb.mutable_heartbeat()->set_unix_ms(1);
    const double hb_us = Time(ops, [&](int i) {
      hb.set_session_id(sessions[i % workers]);
      return (*core)->HandleWorkerMessage(hb).ok();
    });

    fc::MetricAggregator agg({1.5, 5});
    std::string sample_aggregate;
    const double agg_us = Time(ops, [&](int i) {
      const v1::AggregatedStep* s =
          agg.Add(1, workers, Report(ref, tokens, i % workers, 1 + i / workers), 0);
      if (s && sample_aggregate.empty() && s->ranks_reported() == workers)
        s->SerializeToString(&sample_aggregate);
      return s != nullptr;
    });

    auto store = fc::SqliteStore::Open((fs::path(dir) / "store2").string());
    if (!store.ok()) return Fail(store.status().ToString());
    const double put_us = Time(ops, [&](int i) {
      fc::MetricRow row{"job-000001", i, sample_aggregate};
      return (*store)->PutMetric(row).ok();
    }, &put_max_us);

    // Raw SQLite variants on a scratch database with the Store's settings.
    sqlite3* db = nullptr;
    const std::string raw = (fs::path(dir) / "raw.db").string();
    if (sqlite3_open(raw.c_str(), &db) != SQLITE_OK) return Fail("sqlite open");
    sqlite3_exec(db,
                 "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                 "CREATE TABLE metrics(job_id TEXT, step INTEGER, aggregate "
                 "BLOB, PRIMARY KEY(job_id, step));",
                 nullptr, nullptr, nullptr);
    const char* sql = "INSERT OR REPLACE INTO metrics VALUES(?,?,?)";
    auto bind_step = [&](sqlite3_stmt* st, int64_t step) {
      sqlite3_bind_text(st, 1, "job-000001", -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 2, step);
      sqlite3_bind_blob(st, 3, sample_aggregate.data(),
                        static_cast<int>(sample_aggregate.size()),
                        SQLITE_TRANSIENT);
      const bool ok = sqlite3_step(st) == SQLITE_DONE;
      sqlite3_reset(st);
      return ok;
    };
    int64_t base = 0;
    const double prep_us = Time(ops, [&](int i) {
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
      bool ok = bind_step(st, base + i);
      sqlite3_finalize(st);
      return ok;
    });
    base += ops;
    sqlite3_stmt* cached = nullptr;
    sqlite3_prepare_v2(db, sql, -1, &cached, nullptr);
    const double cached_us =
        Time(ops, [&](int i) { return bind_step(cached, base + i); });
    base += ops;
    const double batch_us = Time(ops, [&](int i) {
      if (i % 100 == 0) sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
      bool ok = bind_step(cached, base + i);
      if (i % 100 == 99 || i == ops - 1)
        ok &= sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK;
      return ok;
    });
    sqlite3_finalize(cached);
    sqlite3_close(db);

    if (report_us < 0 || hb_us < 0 || agg_us < 0 || put_us < 0 ||
        prep_us < 0 || cached_us < 0 || batch_us < 0)
      return Fail("an operation failed");
    json = absl::StrFormat(
        "{\"workers\":%d,\"ops\":%d,\"aggregate_bytes\":%d,"
        "\"core_report_us\":%.2f,\"core_report_max_us\":%.0f,"
        "\"core_heartbeat_us\":%.2f,"
        "\"aggregator_add_us\":%.2f,\"store_put_metric_us\":%.2f,"
        "\"store_put_metric_max_us\":%.0f,"
        "\"sqlite_prepare_each_us\":%.2f,\"sqlite_cached_stmt_us\":%.2f,"
        "\"sqlite_batch100_us\":%.2f}",
        workers, ops, static_cast<int>(sample_aggregate.size()), report_us,
        report_max_us, hb_us, agg_us, put_us, put_max_us, prep_us, cached_us,
        batch_us);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::printf("%s\n", json.c_str());
  return 0;
}
