// MetricWriter against a real Store (SQLite in a temp dir): commit before
// the callback, collapse of rewrites, survival across reopen, and the
// failure path (another connection holds the write lock).
#include "coordinator/metric_writer.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/memory_store.h"
#include "coordinator/sqlite_store.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("fw-writer-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// The stored aggregate of (job, step), or "" when absent.
std::string Stored(Store& store, const std::string& job, int64_t step) {
  auto rows = store.LoadMetrics(job);
  EXPECT_TRUE(rows.ok()) << rows.status();
  if (!rows.ok()) return "";
  for (const MetricRow& r : *rows)
    if (r.step == step) return r.aggregate;
  return "";
}

TEST(MetricWriterTest, RowIsCommittedBeforeItsCallbackAndSurvivesReopen) {
  const std::string dir = TempDir("commit");
  {
    auto store = SqliteStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    auto writer = MetricWriter::Create(store->get());
    absl::Mutex mu;
    std::vector<std::string> seen;  // what the store held in each callback
    int done = 0;
    for (int step = 1; step <= 20; ++step) {
      const std::string agg = "agg" + std::to_string(step);
      writer->Stage(MetricRow{"job", step, agg},
                    [&, step, agg](absl::Status s) {
                      EXPECT_TRUE(s.ok()) << s;
                      std::string got = Stored(**store, "job", step);
                      absl::MutexLock l(&mu);
                      seen.push_back(got == agg ? "ok" : "missing " + agg);
                      ++done;
                    });
    }
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(+[](int* d) { return *d == 20; }, &done));
    for (const std::string& s : seen) EXPECT_EQ(s, "ok");
    EXPECT_LE(writer->commits(), 20);
  }
  auto store = SqliteStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto rows = (*store)->LoadMetrics("job");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 20u);
  EXPECT_EQ((*rows)[19].aggregate, "agg20");
  std::filesystem::remove_all(dir);
}

TEST(MetricWriterTest, RewritesOfOneStepCollapseIntoOneRowPerCommit) {
  const std::string dir = TempDir("collapse");
  auto store = SqliteStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto writer = MetricWriter::Create(store->get());
  // The first commit's callback holds the flusher until 50 rewrites of the
  // same step are staged: they must go out as one row in one commit.
  absl::Notification staged, first_done, last_done;
  writer->Stage(MetricRow{"job", 7, "v0"}, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    first_done.Notify();
    staged.WaitForNotification();
  });
  first_done.WaitForNotification();
  absl::Mutex mu;
  int acked = 0;
  for (int i = 1; i <= 50; ++i)
    writer->Stage(MetricRow{"job", 7, "v" + std::to_string(i)},
                  [&, i](absl::Status s) {
                    EXPECT_TRUE(s.ok());
                    EXPECT_EQ(Stored(**store, "job", 7), "v50");
                    absl::MutexLock l(&mu);
                    if (++acked == 50) last_done.Notify();
                  });
  staged.Notify();
  last_done.WaitForNotification();
  EXPECT_EQ(writer->commits(), 2);
  writer.reset();
  store->reset();
  std::filesystem::remove_all(dir);
}

TEST(MetricWriterTest, FailedCommitReportsUnavailableAndIsRetried) {
  const std::string dir = TempDir("fail");
  auto store = SqliteStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto writer = MetricWriter::Create(store->get());
  // Another connection takes the write lock: the writer's commit fails
  // after the store's busy timeout.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr),
            SQLITE_OK);
  absl::Notification failed;
  absl::Status status;
  writer->Stage(MetricRow{"job", 3, "agg3"}, [&](absl::Status s) {
    status = s;
    failed.Notify();
  });
  failed.WaitForNotification();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("not committed"), std::string::npos);
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(other);
  EXPECT_EQ(Stored(**store, "job", 3), "");
  // A retry (a duplicate report stages no row) waits for the next commit,
  // which carries the failed row again.
  absl::Notification retried;
  writer->Stage(std::nullopt, [&](absl::Status s) {
    status = s;
    retried.Notify();
  });
  retried.WaitForNotification();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(Stored(**store, "job", 3), "agg3");
  writer.reset();
  store->reset();
  std::filesystem::remove_all(dir);
}

// The backlog counts staged and in-flight rows; a failing store keeps them
// (Full once past the bound, with the store's error); a commit clears it.
TEST(MetricWriterTest, BacklogIsCountedAndFullWhileTheStoreFails) {
  MemoryStore store;
  const int64_t row_bytes = 3 + 100 + MetricWriter::kRowOverhead;
  auto writer = MetricWriter::Create(&store, nullptr, 3 * row_bytes);
  store.FailWrites(absl::UnavailableError("disk gone"), "PutMetrics");
  for (int step = 1; step <= 3; ++step) {
    EXPECT_FALSE(writer->Full()) << step;
    absl::Notification done;
    writer->Stage(MetricRow{"job", step, std::string(100, 'a')}, [&](absl::Status s) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(writer->backlog_bytes(), step * row_bytes);
  }
  EXPECT_TRUE(writer->Full());
  EXPECT_NE(writer->last_error().message().find("disk gone"), std::string::npos);
  // A rewrite of a staged step replaces its bytes, never adds to them.
  writer->Stage(MetricRow{"job", 3, std::string(50, 'b')}, [](absl::Status) {});
  store.FailWrites(absl::OkStatus());
  absl::Notification committed;
  writer->Stage(std::nullopt, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    committed.Notify();
  });
  committed.WaitForNotification();
  EXPECT_EQ(writer->backlog_bytes(), 0);
  EXPECT_FALSE(writer->Full());
  EXPECT_TRUE(writer->last_error().ok());
  auto rows = store.LoadMetrics("job");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ(rows->back().aggregate, std::string(50, 'b'));
}

}  // namespace
}  // namespace frameworm::coordinator
