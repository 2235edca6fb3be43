#include "coordinator/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {
namespace {

// The error of the last call on `db`: RESOURCE_EXHAUSTED for a full disk
// (nothing was written: the statement or transaction rolled back), else
// INTERNAL; both name the statement.
absl::Status SqliteError(sqlite3* db, const char* what) {
  std::string text = absl::StrCat("sqlite: ", sqlite3_errmsg(db), " in: ", what);
  if ((sqlite3_extended_errcode(db) & 0xff) == SQLITE_FULL)
    return absl::ResourceExhaustedError(std::move(text));
  return absl::InternalError(std::move(text));
}

// A prepared statement with positional binding; finalized on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db), sql_(sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt& Bind(int64_t v) {
    if (ok()) rc_ = sqlite3_bind_int64(stmt_, ++idx_, v);
    return *this;
  }
  Stmt& Bind(const std::string& v) {
    if (ok())
      rc_ = sqlite3_bind_blob(stmt_, ++idx_, v.data(),
                              static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // Makes the statement ready to bind and run again.
  Stmt& Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    idx_ = 0;
    if (rc_ == SQLITE_DONE || rc_ == SQLITE_ROW) rc_ = SQLITE_OK;
    return *this;
  }
  // Runs a statement without results.
  absl::Status Run() {
    if (!ok()) return Error();
    rc_ = sqlite3_step(stmt_);
    if (rc_ != SQLITE_DONE) return Error();
    return absl::OkStatus();
  }
  // Steps to the next row: true with a row, false at the end (check status()).
  bool Next() {
    if (!ok()) return false;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) rc_ = rc;
    return false;
  }
  absl::Status status() { return ok() ? absl::OkStatus() : Error(); }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  int Int32(int col) { return sqlite3_column_int(stmt_, col); }
  std::string Str(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }

 private:
  bool ok() const {
    return rc_ == SQLITE_OK || rc_ == SQLITE_DONE || rc_ == SQLITE_ROW;
  }
  absl::Status Error() { return SqliteError(db_, sql_); }
  sqlite3* db_;
  const char* sql_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
  int idx_ = 0;
};

// Every row `st` yields, each read by `read(st)`; or the statement's error.
template <typename Row, typename Read>
absl::StatusOr<std::vector<Row>> Rows(Stmt& st, Read read) {
  std::vector<Row> out;
  while (st.Next()) out.push_back(read(st));
  if (absl::Status s = st.status(); !s.ok()) return s;
  return out;
}

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs(
  job_id TEXT PRIMARY KEY, seq INTEGER, spec BLOB, state INTEGER,
  generation INTEGER, restarts INTEGER, reason TEXT, submitted_ms INTEGER,
  started_ms INTEGER, finished_ms INTEGER);
CREATE TABLE IF NOT EXISTS generations(
  job_id TEXT, generation INTEGER, started_ms INTEGER, ended_ms INTEGER,
  end_reason TEXT, master_addr TEXT, master_port INTEGER, resume_from TEXT,
  PRIMARY KEY(job_id, generation));
CREATE TABLE IF NOT EXISTS assignments(
  job_id TEXT, generation INTEGER, rank INTEGER, worker TEXT,
  node_rank INTEGER, local_rank INTEGER, task BLOB, state INTEGER,
  PRIMARY KEY(job_id, generation, rank));
CREATE TABLE IF NOT EXISTS checkpoints(
  job_id TEXT, generation INTEGER, step INTEGER, path TEXT, bytes INTEGER,
  checksum TEXT, created_ms INTEGER, secret TEXT NOT NULL DEFAULT '',
  PRIMARY KEY(job_id, path));
CREATE TABLE IF NOT EXISTS metrics(
  job_id TEXT, step INTEGER, aggregate BLOB, PRIMARY KEY(job_id, step));
CREATE TABLE IF NOT EXISTS events(
  seq INTEGER PRIMARY KEY, job_id TEXT, unix_ms INTEGER, event BLOB);
CREATE INDEX IF NOT EXISTS events_by_job ON events(job_id, seq);
CREATE TABLE IF NOT EXISTS event_seq(id INTEGER PRIMARY KEY, max_seq INTEGER);
CREATE TABLE IF NOT EXISTS job_seq(id INTEGER PRIMARY KEY, max_seq INTEGER);
)sql";

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("state dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot create state dir '", dir, "': ", ec.message()));
  std::string path = (std::filesystem::path(dir) / "coordinator.db").string();
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open '", path, "': ", msg));
  }
  sqlite3_busy_timeout(db, 2000);
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  sqlite3_wal_hook(db, &SqliteStore::WalHook, store.get());
  absl::MutexLock l(&store->mu_);
  // WAL with synchronous=FULL: every commit is fsynced before it returns,
  // so what was acknowledged survives a power loss too (group commit keeps
  // the fsyncs to one per batch of reports).
  for (const char* sql :
       {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", kSchema}) {
    absl::Status s = store->ExecLocked(sql);
    if (!s.ok()) return s;
  }
  // A state dir of an older coordinator: its checkpoints table has no
  // secret column yet (its rows read as ""; the first holder's is adopted).
  bool has_secret = false;
  {
    Stmt cols(db, "SELECT name FROM pragma_table_info('checkpoints')");
    while (cols.Next()) has_secret = has_secret || cols.Str(0) == "secret";
    if (absl::Status s = cols.status(); !s.ok()) return s;
  }
  if (!has_secret) {
    absl::Status s = store->ExecLocked(
        "ALTER TABLE checkpoints ADD COLUMN secret TEXT NOT NULL DEFAULT '';");
    if (!s.ok()) return s;
  }
  return store;
}

SqliteStore::~SqliteStore() {
  {
    absl::MutexLock l(&ckpt_mu_);
    if (ckpt_db_) sqlite3_close(ckpt_db_);
  }
  absl::MutexLock l(&mu_);
  sqlite3_finalize(put_metric_);
  sqlite3_close(db_);
}

// Replaces SQLite's auto-checkpoint (which would run inside the commit):
// records the WAL size and checkpoints inline only past the hard limit.
int SqliteStore::WalHook(void* self, sqlite3* db, const char* name,
                         int pages) {
  static_cast<SqliteStore*>(self)->wal_pages_.store(pages,
                                              std::memory_order_relaxed);
  if (pages >= kHardWalPages)
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr,
                              nullptr);
  return SQLITE_OK;
}

absl::StatusOr<int> SqliteStore::CheckpointIfLarge(int min_pages) {
  const int pages = wal_pages_.load(std::memory_order_relaxed);
  if (pages < min_pages) return 0;
  absl::MutexLock l(&ckpt_mu_);
  if (ckpt_db_ == nullptr) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) !=
        SQLITE_OK) {
      std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
      sqlite3_close(db);
      return absl::UnavailableError(
          absl::StrCat("cannot open '", path_, "' to checkpoint: ", msg));
    }
    // A connection opens the WAL only when it first reads: until then a
    // checkpoint on it does nothing (and says log = -1).
    if (sqlite3_exec(db, "PRAGMA schema_version", nullptr, nullptr, nullptr) != SQLITE_OK) {
      absl::Status s = SqliteError(db, "PRAGMA schema_version (checkpoint connection)");
      sqlite3_close(db);
      return s;
    }
    ckpt_db_ = db;
  }
  int log = 0, done = 0;
  int rc = sqlite3_wal_checkpoint_v2(ckpt_db_, nullptr,
                                     SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  if (rc != SQLITE_OK && rc != SQLITE_BUSY)
    return SqliteError(ckpt_db_, "wal_checkpoint(PASSIVE)");
  if (rc == SQLITE_OK && log < 0)
    return absl::InternalError("sqlite: wal_checkpoint(PASSIVE) saw no WAL (log = -1)");
  return std::max(done, 0);
}
absl::Status SqliteStore::Maintain() { return CheckpointIfLarge().status(); }

template <typename Body>
absl::Status SqliteStore::TransactionLocked(Body body) {
  absl::Status s = ExecLocked("BEGIN");
  if (!s.ok()) return s;
  s = body();
  if (s.ok()) s = ExecLocked("COMMIT");
  if (!s.ok()) ExecLocked("ROLLBACK").IgnoreError();
  return s;
}

absl::Status SqliteStore::ExecLocked(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);
    return SqliteError(db_, sql);
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::PutJobLocked(const JobRow& j) {
  return Stmt(db_,
              "INSERT OR REPLACE INTO jobs VALUES(?,?,?,?,?,?,?,?,?,?)")
      .Bind(j.job_id).Bind(j.seq).Bind(j.spec).Bind(int64_t{j.state})
      .Bind(j.generation).Bind(int64_t{j.restarts}).Bind(j.reason)
      .Bind(j.submitted_ms).Bind(j.started_ms).Bind(j.finished_ms)
      .Run();
}

absl::Status SqliteStore::PutJob(const JobRow& job) {
  absl::MutexLock l(&mu_);
  return PutJobLocked(job);
}

absl::Status SqliteStore::StartGeneration(
    const JobRow& job, const GenerationRow& g,
    const std::vector<AssignmentRow>& assignments) {
  absl::MutexLock l(&mu_);
  return TransactionLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status s = PutJobLocked(job);
    if (s.ok())
      s = Stmt(db_,
               "INSERT OR REPLACE INTO generations VALUES(?,?,?,?,?,?,?,?)")
              .Bind(g.job_id).Bind(g.generation).Bind(g.started_ms)
              .Bind(g.ended_ms).Bind(g.end_reason).Bind(g.master_addr)
              .Bind(int64_t{g.master_port}).Bind(g.resume_from)
              .Run();
    for (const AssignmentRow& a : assignments) {
      if (!s.ok()) break;
      s = Stmt(db_,
               "INSERT OR REPLACE INTO assignments VALUES(?,?,?,?,?,?,?,?)")
              .Bind(a.job_id).Bind(a.generation).Bind(int64_t{a.rank})
              .Bind(a.worker).Bind(int64_t{a.node_rank})
              .Bind(int64_t{a.local_rank}).Bind(a.task).Bind(int64_t{a.state})
              .Run();
    }
    for (const char* sql : {"DELETE FROM generations WHERE job_id=? AND generation<=?",
                            "DELETE FROM assignments WHERE job_id=? AND generation<=?"}) {
      if (s.ok()) s = Stmt(db_, sql).Bind(g.job_id).Bind(g.generation - kKeptGenerations).Run();
    }
    return s;
  });
}

absl::Status SqliteStore::EndGeneration(const JobRow& job, int64_t generation,
                                  int64_t ended_ms, const std::string& reason) {
  absl::MutexLock l(&mu_);
  return TransactionLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status s = PutJobLocked(job);
    if (!s.ok()) return s;
    return Stmt(db_,
                "UPDATE generations SET ended_ms=?, end_reason=? "
                "WHERE job_id=? AND generation=?")
        .Bind(ended_ms).Bind(reason).Bind(job.job_id).Bind(generation)
        .Run();
  });
}

absl::Status SqliteStore::SetAssignmentState(const std::string& job_id,
                                       int64_t generation, int rank,
                                       int state) {
  absl::MutexLock l(&mu_);
  return Stmt(db_,
              "UPDATE assignments SET state=? "
              "WHERE job_id=? AND generation=? AND rank=?")
      .Bind(int64_t{state}).Bind(job_id).Bind(generation).Bind(int64_t{rank})
      .Run();
}

absl::Status SqliteStore::AddCheckpoint(const CheckpointRow& c) {
  absl::MutexLock l(&mu_);
  return Stmt(db_,
              "INSERT OR REPLACE INTO checkpoints(job_id, generation, step, path, bytes, "
              "checksum, created_ms, secret) VALUES(?,?,?,?,?,?,?,?)")
      .Bind(c.job_id).Bind(c.generation).Bind(c.step).Bind(c.path)
      .Bind(c.bytes).Bind(c.checksum).Bind(c.created_ms).Bind(c.secret)
      .Run();
}

absl::Status SqliteStore::DeleteCheckpoint(const std::string& job_id,
                                     const std::string& path) {
  absl::MutexLock l(&mu_);
  return Stmt(db_, "DELETE FROM checkpoints WHERE job_id=? AND path=?")
      .Bind(job_id).Bind(path).Run();
}

absl::Status SqliteStore::PutMetrics(const std::vector<MetricRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  constexpr const char* kSql = "INSERT OR REPLACE INTO metrics VALUES(?,?,?)";
  auto error = [&](const char* what) { return SqliteError(db_, what); };
  if (put_metric_ == nullptr &&
      sqlite3_prepare_v2(db_, kSql, -1, &put_metric_, nullptr) != SQLITE_OK) {
    absl::Status s = error(kSql);
    sqlite3_finalize(put_metric_);
    put_metric_ = nullptr;
    return s;
  }
  absl::Status s = ExecLocked("BEGIN");
  if (!s.ok()) return s;
  for (const MetricRow& m : rows) {
    sqlite3_reset(put_metric_);
    sqlite3_clear_bindings(put_metric_);
    if (sqlite3_bind_blob(put_metric_, 1, m.job_id.data(),
                          static_cast<int>(m.job_id.size()),
                          SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(put_metric_, 2, m.step) != SQLITE_OK ||
        sqlite3_bind_blob(put_metric_, 3, m.aggregate.data(),
                          static_cast<int>(m.aggregate.size()),
                          SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_step(put_metric_) != SQLITE_DONE) {
      s = error(kSql);
      break;
    }
  }
  sqlite3_reset(put_metric_);
  sqlite3_clear_bindings(put_metric_);  // no pointers into `rows` remain
  if (s.ok()) s = ExecLocked("COMMIT");
  if (!s.ok()) ExecLocked("ROLLBACK").IgnoreError();
  return s;
}

absl::Status SqliteStore::DeleteMetrics(const std::string& job_id,
                                        const std::vector<int64_t>& steps) {
  if (steps.empty()) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  return TransactionLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt st(db_, "DELETE FROM metrics WHERE job_id=? AND step=?");  // prepared once
    for (int64_t step : steps) {
      if (absl::Status s = st.Reset().Bind(job_id).Bind(step).Run(); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

absl::Status SqliteStore::DeleteJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  return TransactionLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const char* sql : {"INSERT INTO job_seq SELECT 1, seq FROM jobs WHERE job_id=? "
                            "ON CONFLICT(id) DO UPDATE SET max_seq = MAX(max_seq, excluded.max_seq)",
                            "DELETE FROM metrics WHERE job_id=?",
                            "DELETE FROM events WHERE job_id=?",
                            "DELETE FROM checkpoints WHERE job_id=?",
                            "DELETE FROM assignments WHERE job_id=?",
                            "DELETE FROM generations WHERE job_id=?",
                            "DELETE FROM jobs WHERE job_id=?"}) {
      absl::Status s = Stmt(db_, sql).Bind(job_id).Run();
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

absl::Status SqliteStore::AddEvents(const std::vector<EventRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  return TransactionLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt st(db_, "INSERT OR REPLACE INTO events VALUES(?,?,?,?)");  // prepared once
    int64_t max_seq = 0;
    for (const EventRow& e : rows) {
      absl::Status s = st.Reset().Bind(e.seq).Bind(e.job_id).Bind(e.unix_ms).Bind(e.event).Run();
      if (!s.ok()) return s;
      max_seq = std::max(max_seq, e.seq);
    }
    // The high-water mark outlives trimmed and deleted rows, so seqs are
    // never reused after a restart.
    return Stmt(db_,
                "INSERT INTO event_seq VALUES(1, ?) ON CONFLICT(id) DO UPDATE "
                "SET max_seq = MAX(max_seq, excluded.max_seq)")
        .Bind(max_seq)
        .Run();
  });
}

absl::Status SqliteStore::TrimEvents(int64_t keep) {
  absl::MutexLock l(&mu_);
  // For each job (and the cluster, job_id ''), the seq of its keep-th
  // newest event: everything of that job below it goes.
  return Stmt(db_,
              "DELETE FROM events WHERE seq < (SELECT e.seq FROM events e "
              "WHERE e.job_id = events.job_id ORDER BY e.seq DESC LIMIT 1 OFFSET ?)")
      .Bind(std::max<int64_t>(keep, 1) - 1)
      .Run();
}

namespace {
// A row of "SELECT seq, job_id, unix_ms, event FROM events".
EventRow ReadEventRow(Stmt& r) { return EventRow{r.Int(0), r.Str(1), r.Int(2), r.Str(3)}; }
}  // namespace

absl::StatusOr<std::vector<EventRow>> SqliteStore::LoadEvents(
    const std::optional<std::string>& job_id, int64_t after_seq, int limit) {
  absl::MutexLock l(&mu_);
  const auto read = ReadEventRow;
  if (job_id) {
    Stmt st(db_,
            "SELECT seq, job_id, unix_ms, event FROM events WHERE job_id=? AND seq>? "
            "ORDER BY seq LIMIT ?");
    st.Bind(*job_id).Bind(after_seq).Bind(int64_t{limit});
    return Rows<EventRow>(st, read);
  }
  Stmt st(db_, "SELECT seq, job_id, unix_ms, event FROM events WHERE seq>? ORDER BY seq LIMIT ?");
  st.Bind(after_seq).Bind(int64_t{limit});
  return Rows<EventRow>(st, read);
}

absl::StatusOr<std::vector<EventRow>> SqliteStore::LoadNewestEvents(
    const std::optional<std::string>& job_id, int limit) {
  absl::MutexLock l(&mu_);
  const auto read = ReadEventRow;
  absl::StatusOr<std::vector<EventRow>> rows;
  if (job_id) {
    Stmt st(db_,
            "SELECT seq, job_id, unix_ms, event FROM events WHERE job_id=? "
            "ORDER BY seq DESC LIMIT ?");
    st.Bind(*job_id).Bind(int64_t{limit});
    rows = Rows<EventRow>(st, read);
  } else {
    Stmt st(db_, "SELECT seq, job_id, unix_ms, event FROM events ORDER BY seq DESC LIMIT ?");
    st.Bind(int64_t{limit});
    rows = Rows<EventRow>(st, read);
  }
  if (rows.ok()) std::reverse(rows->begin(), rows->end());
  return rows;
}

absl::StatusOr<int64_t> SqliteStore::MaxEventSeq() {
  absl::MutexLock l(&mu_);
  Stmt st(db_, "SELECT COALESCE(MAX(max_seq), 0) FROM event_seq");
  if (!st.Next()) {
    if (absl::Status s = st.status(); !s.ok()) return s;
    return 0;
  }
  return st.Int(0);
}

absl::StatusOr<int64_t> SqliteStore::MaxJobSeq() {
  absl::MutexLock l(&mu_);
  Stmt st(db_,
          "SELECT MAX((SELECT COALESCE(MAX(max_seq), 0) FROM job_seq), "
          "(SELECT COALESCE(MAX(seq), 0) FROM jobs))");
  if (!st.Next()) {
    if (absl::Status s = st.status(); !s.ok()) return s;
    return 0;
  }
  return st.Int(0);
}

absl::StatusOr<std::vector<JobRow>> SqliteStore::LoadJobs() {
  absl::MutexLock l(&mu_);
  Stmt st(db_,
          "SELECT job_id, seq, spec, state, generation, restarts, reason, "
          "submitted_ms, started_ms, finished_ms FROM jobs ORDER BY seq");
  return Rows<JobRow>(st, [](Stmt& r) {
    return JobRow{r.Str(0), r.Int(1), r.Str(2), r.Int32(3), r.Int(4),
                  r.Int32(5), r.Str(6), r.Int(7), r.Int(8), r.Int(9)};
  });
}

absl::StatusOr<GenerationRow> SqliteStore::LoadGeneration(
    const std::string& job_id, int64_t generation) {
  absl::MutexLock l(&mu_);
  Stmt st(db_,
          "SELECT started_ms, ended_ms, end_reason, master_addr, master_port, "
          "resume_from FROM generations WHERE job_id=? AND generation=?");
  st.Bind(job_id).Bind(generation);
  if (!st.Next()) {
    if (absl::Status s = st.status(); !s.ok()) return s;
    return absl::NotFoundError(
        absl::StrCat("no generation ", generation, " of job ", job_id));
  }
  return GenerationRow{job_id,    generation, st.Int(0),   st.Int(1),
                       st.Str(2), st.Str(3),  st.Int32(4), st.Str(5)};
}

absl::StatusOr<std::vector<AssignmentRow>> SqliteStore::LoadAssignments(
    const std::string& job_id, int64_t generation) {
  absl::MutexLock l(&mu_);
  Stmt st(db_,
          "SELECT rank, worker, node_rank, local_rank, task, state FROM "
          "assignments WHERE job_id=? AND generation=? ORDER BY rank");
  st.Bind(job_id).Bind(generation);
  return Rows<AssignmentRow>(st, [&](Stmt& r) {
    return AssignmentRow{job_id,     generation, r.Int32(0), r.Str(1),
                         r.Int32(2), r.Int32(3), r.Str(4),   r.Int32(5)};
  });
}

absl::StatusOr<std::vector<CheckpointRow>> SqliteStore::LoadCheckpoints(
    const std::string& job_id) {
  absl::MutexLock l(&mu_);
  Stmt st(db_,
          "SELECT generation, step, path, bytes, checksum, created_ms, IFNULL(secret, '') "
          "FROM checkpoints WHERE job_id=? ORDER BY step, created_ms");
  st.Bind(job_id);
  return Rows<CheckpointRow>(st, [&](Stmt& r) {
    return CheckpointRow{job_id,   r.Int(0), r.Int(1), r.Str(2),
                         r.Int(3), r.Str(4), r.Int(5), r.Str(6)};
  });
}

absl::StatusOr<std::vector<MetricRow>> SqliteStore::LoadMetrics(
    const std::string& job_id) {
  absl::MutexLock l(&mu_);
  Stmt st(db_,
          "SELECT step, aggregate FROM metrics WHERE job_id=? ORDER BY step");
  st.Bind(job_id);
  return Rows<MetricRow>(
      st, [&](Stmt& r) { return MetricRow{job_id, r.Int(0), r.Str(1)}; });
}

}  // namespace frameworm::coordinator
