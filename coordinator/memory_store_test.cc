// The Store contract (store.h), checked against both implementations so
// that core tests on a MemoryStore mean what they would on SQLite; then
// MemoryStore's fault injection.
#include "coordinator/memory_store.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/sqlite_store.h"
#include "coordinator/test_dir.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

struct Impl {
  std::string name;
  std::function<std::unique_ptr<Store>(const std::string& dir)> open;
};

class StoreContractTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("contract");
    store_ = GetParam().open(dir_);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContractTest, JobsComeBackInSubmissionOrderAndAreReplaced) {
  ASSERT_TRUE(store_->PutJob({"job-b", 2, "sb", 0, 0, 0, "", 20, 0, 0}).ok());
  ASSERT_TRUE(store_->PutJob({"job-a", 1, "sa", 0, 0, 0, "", 10, 0, 0}).ok());
  ASSERT_TRUE(
      store_->PutJob({"job-b", 2, "sb", 4, 1, 0, "why", 20, 21, 0}).ok());
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job_id, "job-a");
  EXPECT_EQ((*jobs)[1].job_id, "job-b");
  EXPECT_EQ((*jobs)[1].state, 4);
  EXPECT_EQ((*jobs)[1].reason, "why");
}

TEST_P(StoreContractTest, GenerationsAndAssignments) {
  JobRow job{"j", 1, "s", 2, 1, 0, "", 1, 2, 0};
  AssignmentRow a1{"j", 1, 1, "w1", 1, 0, "t1", 0};
  AssignmentRow a0{"j", 1, 0, "w0", 0, 0, "t0", 0};
  ASSERT_TRUE(
      store_
          ->StartGeneration(job, {"j", 1, 2, 0, "", "h", 29500, "/c"}, {a1, a0})
          .ok());
  ASSERT_TRUE(store_->SetAssignmentState("j", 1, 1, 1).ok());
  auto as = store_->LoadAssignments("j", 1);
  ASSERT_TRUE(as.ok());
  ASSERT_EQ(as->size(), 2u);
  EXPECT_EQ((*as)[0].worker, "w0");  // by rank
  EXPECT_EQ((*as)[1].state, 1);
  EXPECT_TRUE(store_->LoadAssignments("j", 2)->empty());
  job.state = 5;
  ASSERT_TRUE(store_->EndGeneration(job, 1, 9, "rank 0 exited").ok());
  auto gen = store_->LoadGeneration("j", 1);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(gen->master_port, 29500);
  EXPECT_EQ(gen->resume_from, "/c");
  EXPECT_EQ(gen->ended_ms, 9);
  EXPECT_EQ(gen->end_reason, "rank 0 exited");
  EXPECT_EQ((*store_->LoadJobs())[0].state, 5);
  EXPECT_EQ(store_->LoadGeneration("j", 7).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreContractTest, UpdatesOfMissingRowsCreateNothing) {
  JobRow job{"j", 1, "s", 3, 4, 0, "", 1, 2, 3};
  ASSERT_TRUE(store_->EndGeneration(job, 4, 3, "gone").ok());
  ASSERT_TRUE(store_->SetAssignmentState("j", 4, 0, 1).ok());
  EXPECT_EQ(store_->LoadGeneration("j", 4).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->LoadAssignments("j", 4)->empty());
  EXPECT_EQ(store_->LoadJobs()->size(), 1u);  // the job row is written
}

TEST_P(StoreContractTest, CheckpointsByStepReplacedByPathDeleted) {
  ASSERT_TRUE(store_->AddCheckpoint({"j", 1, 9, "/c/9", 1, "a", 5}).ok());
  ASSERT_TRUE(store_->AddCheckpoint({"j", 1, 7, "/c/7", 1, "b", 6}).ok());
  ASSERT_TRUE(store_->AddCheckpoint({"j", 2, 8, "/c/9", 2, "c", 7}).ok());
  ASSERT_TRUE(store_->AddCheckpoint({"other", 1, 1, "/o", 1, "d", 1}).ok());
  auto ck = store_->LoadCheckpoints("j");
  ASSERT_TRUE(ck.ok());
  ASSERT_EQ(ck->size(), 2u);
  EXPECT_EQ((*ck)[0].path, "/c/7");
  EXPECT_EQ((*ck)[1].step, 8);  // the same path replaced
  EXPECT_EQ((*ck)[1].checksum, "c");
  ASSERT_TRUE(store_->DeleteCheckpoint("j", "/c/7").ok());
  ASSERT_EQ(store_->LoadCheckpoints("j")->size(), 1u);
  EXPECT_EQ(store_->LoadCheckpoints("other")->size(), 1u);
}

TEST_P(StoreContractTest, MetricsByStepReplacedPerStep) {
  ASSERT_TRUE(store_->PutMetrics({{"j", 4, "a4"}, {"j", 2, "a2"}}).ok());
  ASSERT_TRUE(store_->PutMetric({"j", 4, "a4b"}).ok());
  ASSERT_TRUE(store_->PutMetrics({}).ok());
  ASSERT_TRUE(store_->PutMetric({"k", 1, "k1"}).ok());
  auto m = store_->LoadMetrics("j");
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].step, 2);
  EXPECT_EQ((*m)[1].aggregate, "a4b");
  EXPECT_TRUE(store_->Maintain().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Stores, StoreContractTest,
    ::testing::Values(Impl{"memory",
                           [](const std::string&) -> std::unique_ptr<Store> {
                             return std::make_unique<MemoryStore>();
                           }},
                      Impl{
                          "sqlite",
                          [](const std::string& dir) -> std::unique_ptr<Store> {
                            auto s = SqliteStore::Open(dir);
                            EXPECT_TRUE(s.ok()) << s.status();
                            return s.ok() ? std::move(s).value() : nullptr;
                          }}),
    [](const ::testing::TestParamInfo<Impl>& info) { return info.param.name; });

TEST(MemoryStoreTest, FailedWritesChangeNothingUntilCleared) {
  MemoryStore store;
  ASSERT_TRUE(store.PutJob({"j", 1, "s", 0, 0, 0, "", 1, 0, 0}).ok());
  EXPECT_EQ(store.writes(), 1);
  store.FailWrites(absl::UnavailableError("disk full"));
  EXPECT_EQ(store.PutJob({"k", 2, "s", 0, 0, 0, "", 1, 0, 0}).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store
                .StartGeneration({"j", 1, "s", 2, 1, 0, "", 1, 1, 0},
                                 {"j", 1, 1, 0, "", "h", 1, ""},
                                 {{"j", 1, 0, "w", 0, 0, "t", 0}})
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.PutMetric({"j", 1, "a"}).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.LoadJobs()->size(), 1u);  // reads still work
  EXPECT_EQ((*store.LoadJobs())[0].state, 0);
  EXPECT_TRUE(store.LoadAssignments("j", 1)->empty());
  EXPECT_TRUE(store.LoadMetrics("j")->empty());
  EXPECT_EQ(store.writes(), 1);
  store.FailWrites(absl::OkStatus());
  EXPECT_TRUE(store.PutMetric({"j", 1, "a"}).ok());
  EXPECT_EQ(store.LoadMetrics("j")->size(), 1u);
  EXPECT_EQ(store.writes(), 2);
}

}  // namespace
}  // namespace frameworm::coordinator
