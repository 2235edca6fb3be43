#include "coordinator/memory_store.h"
#include "coordinator/sqlite_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("fw-store-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(StoreTest, WriteReopenReadBack) {
  const std::string dir = TempDir("reopen");
  {
    auto store = SqliteStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    JobRow job{"job-1", 1, std::string("spec\0bytes", 10), 2, 3, 1, "why",
               100, 200, 0};
    GenerationRow gen{"job-1", 3, 200, 0, "", "10.0.0.1", 29501, "/c/7"};
    AssignmentRow a0{"job-1", 3, 0, "w0", 0, 0, "task0", 0};
    AssignmentRow a1{"job-1", 3, 1, "w1", 1, 0, "task1", 0};
    ASSERT_TRUE((*store)->StartGeneration(job, gen, {a0, a1}).ok());
    ASSERT_TRUE((*store)->SetAssignmentState("job-1", 3, 1, 1).ok());
    ASSERT_TRUE((*store)->AddCheckpoint({"job-1", 3, 7, "/c/7", 10, "ab", 5}).ok());
    ASSERT_TRUE((*store)->AddCheckpoint({"job-1", 3, 9, "/c/9", 11, "cd", 6, "hold-secret"}).ok());
    ASSERT_TRUE((*store)->DeleteCheckpoint("job-1", "/c/7").ok());
    ASSERT_TRUE((*store)->PutMetric({"job-1", 4, "agg4"}).ok());
    ASSERT_TRUE((*store)->PutMetric({"job-1", 4, "agg4b"}).ok());
    ASSERT_TRUE((*store)->PutMetric({"job-1", 2, "agg2"}).ok());
    ASSERT_TRUE((*store)->PutJob({"job-2", 2, "s2", 1, 0, 0, "", 300, 0, 0}).ok());
  }
  auto store = SqliteStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job_id, "job-1");
  EXPECT_EQ((*jobs)[0].spec, std::string("spec\0bytes", 10));
  EXPECT_EQ((*jobs)[0].generation, 3);
  EXPECT_EQ((*jobs)[0].reason, "why");
  EXPECT_EQ((*jobs)[1].job_id, "job-2");
  auto gen = (*store)->LoadGeneration("job-1", 3);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(gen->master_port, 29501);
  EXPECT_EQ(gen->resume_from, "/c/7");
  auto as = (*store)->LoadAssignments("job-1", 3);
  ASSERT_TRUE(as.ok());
  ASSERT_EQ(as->size(), 2u);
  EXPECT_EQ((*as)[1].worker, "w1");
  EXPECT_EQ((*as)[1].state, 1);
  EXPECT_EQ((*as)[0].task, "task0");
  auto ck = (*store)->LoadCheckpoints("job-1");
  ASSERT_TRUE(ck.ok());
  ASSERT_EQ(ck->size(), 1u);
  EXPECT_EQ((*ck)[0].step, 9);
  EXPECT_EQ((*ck)[0].checksum, "cd");
  EXPECT_EQ((*ck)[0].secret, "hold-secret");
  auto m = (*store)->LoadMetrics("job-1");
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].step, 2);
  EXPECT_EQ((*m)[1].aggregate, "agg4b");
  EXPECT_EQ((*store)->LoadGeneration("job-1", 99).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// A state dir of a coordinator that stored no hold secrets: opening it adds
// the column, its rows read with an empty secret, new rows keep theirs.
TEST(StoreTest, AnOlderCheckpointsTableGainsTheSecretColumn) {
  const std::string dir = TempDir("migrate");
  std::filesystem::create_directories(dir);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE checkpoints(job_id TEXT, generation INTEGER, step INTEGER, "
                           "path TEXT, bytes INTEGER, checksum TEXT, created_ms INTEGER, "
                           "PRIMARY KEY(job_id, path));"
                           // strings as blobs, as the store binds them
                           "INSERT INTO checkpoints VALUES(CAST('job-1' AS BLOB), 1, 5, "
                           "CAST('/c/5' AS BLOB), 10, CAST('ab' AS BLOB), 7);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  for (int open = 0; open < 2; ++open) {  // the second open finds the column
    auto store = SqliteStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    if (open == 0) {
      ASSERT_TRUE((*store)->AddCheckpoint({"job-1", 1, 6, "/c/6", 11, "cd", 8, "s6"}).ok());
    }
    auto ck = (*store)->LoadCheckpoints("job-1");
    ASSERT_TRUE(ck.ok()) << ck.status();
    ASSERT_EQ(ck->size(), 2u);
    EXPECT_EQ((*ck)[0].path, "/c/5");
    EXPECT_EQ((*ck)[0].secret, "");
    EXPECT_EQ((*ck)[1].secret, "s6");
  }
  std::filesystem::remove_all(dir);
}

TEST(StoreTest, EndGenerationUpdatesJobAndGeneration) {
  const std::string dir = TempDir("end");
  auto store = SqliteStore::Open(dir);
  ASSERT_TRUE(store.ok());
  JobRow job{"j", 1, "s", 2, 1, 0, "", 1, 2, 0};
  ASSERT_TRUE((*store)->StartGeneration(job, {"j", 1, 2, 0, "", "h", 1, ""}, {}).ok());
  job.state = 5;
  job.finished_ms = 9;
  ASSERT_TRUE((*store)->EndGeneration(job, 1, 9, "rank 0 exited").ok());
  auto gen = (*store)->LoadGeneration("j", 1);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(gen->ended_ms, 9);
  EXPECT_EQ(gen->end_reason, "rank 0 exited");
  EXPECT_EQ((*(*store)->LoadJobs())[0].state, 5);
  std::filesystem::remove_all(dir);
}

TEST(StoreTest, PutMetricsIsOneTransactionAndWalIsCheckpointed) {
  const std::string dir = TempDir("batch");
  auto store = SqliteStore::Open(dir);
  ASSERT_TRUE(store.ok());
  std::vector<MetricRow> rows;
  for (int i = 0; i < 300; ++i)
    rows.push_back({"j", i, std::string(2000, static_cast<char>('a' + i % 26))});
  ASSERT_TRUE((*store)->PutMetrics(rows).ok());
  ASSERT_TRUE((*store)->PutMetrics({}).ok());
  EXPECT_EQ((*store)->LoadMetrics("j")->size(), 300u);
  // ~600 KB went through the WAL: it is large enough to checkpoint, and a
  // checkpoint on the second connection succeeds with the main one open.
  const auto db_file = std::filesystem::path(dir) / "coordinator.db";
  const auto before = std::filesystem::file_size(db_file);
  auto copied = (*store)->CheckpointIfLarge(10);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_GE(*copied, 10);  // frames really copied into the database file
  EXPECT_GT(std::filesystem::file_size(db_file), before + 500000);
  auto small = (*store)->CheckpointIfLarge(1 << 30);  // below: nothing done
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small, 0);
  std::filesystem::remove_all(dir);
}

TEST(StoreTest, DeleteMetricsAndDeleteJobRemoveOnlyThatJobsRows) {
  const std::string dir = TempDir("delete");
  {
    auto store = SqliteStore::Open(dir);
    ASSERT_TRUE(store.ok());
    for (const std::string id : {"a", "b"}) {
      JobRow job{id, id == "a" ? 1 : 2, "spec", 2, 1, 0, "", 1, 2, 0};
      ASSERT_TRUE((*store)->StartGeneration(job, {id, 1, 2, 0, "", "h", 1, ""},
                                            {{id, 1, 0, "w", 0, 0, "t", 0}}).ok());
      ASSERT_TRUE((*store)->AddCheckpoint({id, 1, 5, "/c/" + id, 1, "x", 3}).ok());
      for (int step = 1; step <= 5; ++step)
        ASSERT_TRUE((*store)->PutMetric({id, step, "m"}).ok());
    }
    ASSERT_TRUE((*store)->DeleteMetrics("a", {2, 4, 99}).ok());  // 99: missing, fine
    ASSERT_TRUE((*store)->DeleteMetrics("a", {}).ok());
    ASSERT_TRUE((*store)->DeleteJob("b").ok());
    ASSERT_TRUE((*store)->DeleteJob("never-was").ok());
  }
  auto store = SqliteStore::Open(dir);  // committed: seen after reopening
  ASSERT_TRUE(store.ok());
  std::vector<int64_t> steps;
  for (const MetricRow& m : *(*store)->LoadMetrics("a")) steps.push_back(m.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 3, 5}));
  ASSERT_EQ((*store)->LoadJobs()->size(), 1u);
  EXPECT_EQ((*(*store)->LoadJobs())[0].job_id, "a");
  EXPECT_TRUE((*store)->LoadMetrics("b")->empty());
  EXPECT_TRUE((*store)->LoadCheckpoints("b")->empty());
  EXPECT_TRUE((*store)->LoadAssignments("b", 1)->empty());
  EXPECT_EQ((*store)->LoadGeneration("b", 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->LoadCheckpoints("a")->size(), 1u);
  // The deleted job's seq (2) stays the highest ever stored.
  EXPECT_EQ(*(*store)->MaxJobSeq(), 2);
  ASSERT_TRUE((*store)->DeleteJob("a").ok());
  EXPECT_EQ(*(*store)->MaxJobSeq(), 2);
  std::filesystem::remove_all(dir);
}

// A job that restarts again and again keeps the rows of its newest
// generations only (the current one is what a restart reads back).
TEST(StoreTest, OnlyTheNewestGenerationsRowsAreKept) {
  const std::string dir = TempDir("generations");
  auto store = SqliteStore::Open(dir);
  ASSERT_TRUE(store.ok());
  MemoryStore memory;
  for (Store* s : std::vector<Store*>{store->get(), &memory}) {
    for (int64_t g = 1; g <= 10; ++g) {
      JobRow job{"a", 1, "spec", 2, g, g - 1, "", 1, 2, 0};
      ASSERT_TRUE(s->StartGeneration(job, {"a", g, 2, 0, "", "h", 1, ""},
                                     {{"a", g, 0, "w", 0, 0, "t", 0}, {"a", g, 1, "w", 0, 1, "t", 0}})
                      .ok());
    }
    for (int64_t g = 1; g <= 10; ++g) {
      const bool kept = g > 10 - Store::kKeptGenerations;
      EXPECT_EQ(s->LoadGeneration("a", g).ok(), kept) << g;
      EXPECT_EQ(s->LoadAssignments("a", g)->size(), kept ? 2u : 0u) << g;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(StoreTest, OpenFailsOnUnusableDir) {
  // A regular file where the directory should be.
  const std::string file = TempDir("file");
  { std::FILE* f = std::fopen(file.c_str(), "w"); std::fclose(f); }
  auto store = SqliteStore::Open(file + "/sub");
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("sub"), std::string::npos);
  std::filesystem::remove(file);
  EXPECT_EQ(SqliteStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frameworm::coordinator
