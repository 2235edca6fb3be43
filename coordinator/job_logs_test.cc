#include "coordinator/job_logs.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "coordinator/test_dir.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

class JobLogsTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = FreshTestDir("logs"); }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_F(JobLogsTest, AppendsThenReadsFromOffsets) {
  JobLogs logs({root_});
  EXPECT_EQ(logs.Path("job-1", 3), root_ + "/job-1/rank-3.log");
  EXPECT_EQ(logs.Read("job-1", 0, 0, 100).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(logs.Append("job-1", 0, "hello ").ok());
  ASSERT_TRUE(logs.Append("job-1", 0, "world\n").ok());
  EXPECT_EQ(*logs.Read("job-1", 0, 0, 100), "hello world\n");
  EXPECT_EQ(*logs.Read("job-1", 0, 6, 3), "wor");
  EXPECT_EQ(*logs.Read("job-1", 0, 12, 100), "");   // at the end
  EXPECT_EQ(*logs.Read("job-1", 0, 500, 100), "");  // past it
}

TEST_F(JobLogsTest, RanksListsTheFilesThatExist) {
  JobLogs logs({root_});
  EXPECT_TRUE(logs.Ranks("job-1")->empty());  // no directory yet
  ASSERT_TRUE(logs.Append("job-1", 10, "x").ok());
  ASSERT_TRUE(logs.Append("job-1", 2, "y").ok());
  ASSERT_TRUE(logs.Append("job-2", 0, "z").ok());
  std::ofstream(logs.Dir("job-1") + "/notes.txt") << "not a rank log";
  EXPECT_EQ(*logs.Ranks("job-1"), (std::vector<int>{2, 10}));
}

TEST_F(JobLogsTest, RefusesPathsOutsideTheRoot) {
  JobLogs logs({root_});
  for (const char* bad : {"", ".", "..", "../etc", "a/b"}) {
    EXPECT_EQ(logs.Append(bad, 0, "x").code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ(logs.Read(bad, 0, 0, 1).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_FALSE(logs.Ranks(bad).ok()) << bad;
  }
  EXPECT_EQ(logs.Append("job-1", -1, "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(logs.Read("job-1", 0, -1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(root_));  // nothing was created
  EXPECT_TRUE(IsPathComponent("job-000001"));
  EXPECT_FALSE(IsPathComponent(std::string("a\0b", 3)));
}

}  // namespace
}  // namespace frameworm::coordinator
