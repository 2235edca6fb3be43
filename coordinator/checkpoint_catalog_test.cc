#include "coordinator/checkpoint_catalog.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "coordinator/memory_store.h"
#include "coordinator/test_dir.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

class CheckpointCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("catalog");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A record of `job` at `step`, with a file at its path.
  v1::CheckpointRecord Rec(const std::string& job, int64_t step,
                           const std::string& name = "") {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(job);
    r.mutable_ref()->set_generation(1);
    r.set_step(step);
    r.set_path(dir_ + "/" + (name.empty() ? std::to_string(step) : name));
    r.set_bytes(4);
    r.set_created_unix_ms(1000 + step);
    std::ofstream(r.path()) << "data";
    return r;
  }
  std::vector<int64_t> Steps(const CheckpointCatalog& c,
                             const std::string& job) {
    std::vector<int64_t> out;
    for (const auto& r : c.List(job)) out.push_back(r.step());
    return out;
  }

  std::string dir_;
  MemoryStore store_;
};

TEST_F(CheckpointCatalogTest, KeepsNewestByStepAndNeverDeletesAReportedPath) {
  CheckpointCatalog catalog(store_);
  EXPECT_TRUE(catalog.List("j").empty());
  EXPECT_EQ(catalog.Newest("j"), "");
  for (int64_t step : {20, 10, 30}) {
    auto expired = catalog.Record(Rec("j", step), 2);
    ASSERT_TRUE(expired.ok()) << expired.status();
    if (step == 30) {
      // Out-of-order reports still sort by step: 10 is the oldest.
      EXPECT_EQ(*expired, std::vector<std::string>{dir_ + "/10"});
    } else {
      EXPECT_TRUE(expired->empty());
    }
  }
  EXPECT_EQ(Steps(catalog, "j"), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(catalog.Newest("j"), dir_ + "/30");
  // A reported path comes from a request: the catalog never deletes it.
  EXPECT_TRUE(fs::exists(dir_ + "/10"));
  EXPECT_TRUE(fs::exists(dir_ + "/20"));
  EXPECT_EQ(store_.LoadCheckpoints("j")->size(), 2u);
}

TEST_F(CheckpointCatalogTest, SamePathReplacesAndKeepZeroKeepsAll) {
  CheckpointCatalog catalog(store_);
  for (int64_t step = 1; step <= 5; ++step)
    ASSERT_TRUE(catalog.Record(Rec("j", step), 0)->empty());
  ASSERT_TRUE(catalog.Record(Rec("j", 9, "3"), 0).ok());  // path of step 3
  EXPECT_EQ(Steps(catalog, "j"), (std::vector<int64_t>{1, 2, 4, 5, 9}));
  EXPECT_EQ(store_.LoadCheckpoints("j")->size(), 5u);
  EXPECT_TRUE(catalog.List("other").empty());
}

TEST_F(CheckpointCatalogTest, RefusedRecordsChangeNothing) {
  CheckpointCatalog catalog(store_);
  v1::CheckpointRecord r = Rec("j", 1);
  r.clear_path();
  EXPECT_EQ(catalog.Record(r, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  r = Rec("j", -1, "neg");
  EXPECT_EQ(catalog.Record(r, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(catalog.Record(Rec("j", 1), 1).ok());
  store_.FailWrites(absl::InternalError("disk"));
  EXPECT_EQ(catalog.Record(Rec("j", 2), 1).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(Steps(catalog, "j"), std::vector<int64_t>{1});
  EXPECT_TRUE(fs::exists(dir_ + "/1"));  // nothing expired
}

TEST_F(CheckpointCatalogTest, LoadReadsBackWhatWasRecorded) {
  {
    CheckpointCatalog catalog(store_);
    ASSERT_TRUE(catalog.Record(Rec("j", 7), 3).ok());
    ASSERT_TRUE(catalog.Record(Rec("j", 8), 3).ok());
  }
  CheckpointCatalog reloaded(store_);
  ASSERT_TRUE(reloaded.Load("j").ok());
  ASSERT_EQ(reloaded.List("j").size(), 2u);
  const v1::CheckpointRecord& r = reloaded.List("j")[1];
  EXPECT_EQ(r.step(), 8);
  EXPECT_EQ(r.ref().job_id(), "j");
  EXPECT_EQ(r.ref().generation(), 1);
  EXPECT_EQ(r.bytes(), 4);
  EXPECT_EQ(r.created_unix_ms(), 1008);
  EXPECT_EQ(reloaded.Newest("j"), dir_ + "/8");
}

// A program that counts its steps from 0 again after a restart (it does not
// resume) saves newer state at lower steps: ordered by step alone, the new
// generation's checkpoints were the oldest and expired as they were
// reported (rank 0 deleted them), and a restart resumed from the old
// generation's. A later generation's record is newer whatever its step.
TEST_F(CheckpointCatalogTest, ALaterGenerationIsNewerWhateverItsStep) {
  CheckpointCatalog catalog(store_);
  ASSERT_TRUE(catalog.Record(Rec("j", 400, "g1-400"), 2)->empty());
  ASSERT_TRUE(catalog.Record(Rec("j", 500, "g1-500"), 2)->empty());
  v1::CheckpointRecord g2 = Rec("j", 100, "g2-100");
  g2.mutable_ref()->set_generation(2);
  auto expired = catalog.Record(g2, 2);
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, std::vector<std::string>{dir_ + "/g1-400"});
  EXPECT_EQ(catalog.Newest("j"), dir_ + "/g2-100");
  g2 = Rec("j", 200, "g2-200");
  g2.mutable_ref()->set_generation(2);
  expired = catalog.Record(g2, 2);
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, std::vector<std::string>{dir_ + "/g1-500"});
  EXPECT_EQ(Steps(catalog, "j"), (std::vector<int64_t>{100, 200}));
  // A step both generations saved: Find and AddHolder mean the newer one.
  v1::CheckpointRecord g3 = Rec("j", 200, "g3-200");
  g3.mutable_ref()->set_generation(3);
  ASSERT_TRUE(catalog.Record(g3, 3).ok());
  ASSERT_NE(catalog.Find("j", 200), nullptr);
  EXPECT_EQ(catalog.Find("j", 200)->path(), dir_ + "/g3-200");
  EXPECT_EQ(catalog.AddHolder("j", 200, "w1"), 1);
  EXPECT_EQ(catalog.Find("j", 200)->holders_size(), 1);
  EXPECT_EQ(catalog.List("j")[1].holders_size(), 0);  // generation 2's
  // The order survives a coordinator restart (the store's rows are by step).
  CheckpointCatalog reloaded(store_);
  ASSERT_TRUE(reloaded.Load("j").ok());
  std::vector<std::string> paths;
  for (const auto& r : reloaded.List("j")) paths.push_back(r.path());
  EXPECT_EQ(paths, (std::vector<std::string>{dir_ + "/g2-100", dir_ + "/g2-200",
                                             dir_ + "/g3-200"}));
  EXPECT_EQ(reloaded.Newest("j"), dir_ + "/g3-200");
}

}  // namespace
}  // namespace frameworm::coordinator
