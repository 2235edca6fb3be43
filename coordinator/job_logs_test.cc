#include "coordinator/job_logs.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/log_cap.h"
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
  EXPECT_EQ(logs.Read("job-1", 0, 0, 100)->data, "hello world\n");
  EXPECT_EQ(logs.Read("job-1", 0, 6, 3)->data, "wor");
  EXPECT_EQ(logs.Read("job-1", 0, 6, 3)->from, 6);
  EXPECT_EQ(logs.Read("job-1", 0, 12, 100)->data, "");   // at the end
  EXPECT_EQ(logs.Read("job-1", 0, 500, 100)->data, "");  // past it
}

TEST_F(JobLogsTest, ARanksFileKeepsItsNewestOutputUnderTheCap) {
  const int64_t cap = 4 * kLogCapBlock;
  JobLogs logs({.root = root_, .max_bytes_per_rank = cap});
  std::string line(1000, 'x');
  line.back() = '\n';
  int64_t written = 0;
  for (int i = 0; i < 2000; ++i) {  // 2 MB through a 256 KiB cap
    line[0] = static_cast<char>('a' + i % 26);
    ASSERT_TRUE(logs.Append("job-1", 0, line).ok());
    written += static_cast<int64_t>(line.size());
  }
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(logs.Path("job-1", 0))), written);  // offsets stay
  struct stat st {};
  ASSERT_EQ(::stat(logs.Path("job-1", 0).c_str(), &st), 0);
  EXPECT_LE(st.st_blocks * 512, cap + 2 * kLogCapBlock);  // the disk holds the cap
  // A read from 0 starts at the first byte kept, and says so.
  absl::StatusOr<JobLogs::Chunk> head = logs.Read("job-1", 0, 0, 1000);
  ASSERT_TRUE(head.ok());
  EXPECT_GT(head->from, written - cap);
  EXPECT_EQ(head->from % kLogCapBlock, 0);
  EXPECT_EQ(head->data.size(), 1000u);
  // The newest line is whole, at its offset.
  absl::StatusOr<JobLogs::Chunk> tail = logs.Read("job-1", 0, written - 1000, 5000);
  EXPECT_EQ(tail->from, written - 1000);
  EXPECT_EQ(tail->data[0], static_cast<char>('a' + 1999 % 26));
}

TEST_F(JobLogsTest, AResentChunkIsWrittenOnceAndOnlyItsNewBytes) {
  JobLogs logs({root_});
  auto all = [&] { return logs.Read("job-1", 0, 0, 1000)->data; };
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 1, "stdout", 0, "step 1\n"), 7);
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 1, "stdout", 7, "step 2\n"), 14);
  // The same chunks again (a worker unsure they arrived): nothing written.
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 1, "stdout", 0, "step 1\n"), 14);
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 1, "stdout", 7, "step 2\n"), 14);
  // A chunk overlapping the end: only its new part.
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 1, "stdout", 7, "step 2\ndone\n"), 19);
  EXPECT_EQ(all(), "step 1\nstep 2\ndone\n");
  // stderr, and another generation, are other sources with their own ends.
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 1, "stderr", 0, "warn\n"), 5);
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 2, "stdout", 0, "step 1\n"), 7);
  EXPECT_EQ(all(), "step 1\nstep 2\ndone\nwarn\nstep 1\n");
  // A gap (the worker's cap dropped bytes it never sent) is accepted.
  EXPECT_EQ(*logs.AppendAt("job-1", 0, 2, "stdout", 100, "late\n"), 105);
  EXPECT_EQ(all(), "step 1\nstep 2\ndone\nwarn\nstep 1\nlate\n");
  // Bad sources are refused and write nothing.
  for (auto [gen, stream, off] : std::vector<std::tuple<int64_t, std::string, int64_t>>{
           {1, "stdin", 0}, {1, "stdout\n", 0}, {-1, "stdout", 0}, {1, "stdout", -5},
           {1, "stdout", INT64_MAX}}) {
    EXPECT_EQ(logs.AppendAt("job-1", 0, gen, stream, off, "x").status().code(),
              absl::StatusCode::kInvalidArgument)
        << gen << " " << stream << " " << off;
  }
  EXPECT_EQ(logs.AppendAt("../x", 0, 1, "stdout", 0, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(all(), "step 1\nstep 2\ndone\nwarn\nstep 1\nlate\n");
  // No stream named: written as it comes, every time.
  EXPECT_EQ(*logs.AppendAt("job-1", 1, 0, "", 0, "x"), 1);
  EXPECT_EQ(*logs.AppendAt("job-1", 1, 0, "", 0, "x"), 1);
  EXPECT_EQ(logs.Read("job-1", 1, 0, 10)->data, "xx");
}

TEST_F(JobLogsTest, EndsAreKeptForTheTwoNewestGenerationsAndForgottenWithTheJob) {
  JobLogs logs({root_});
  auto all = [&] { return logs.Read("job-1", 0, 0, 1000)->data; };
  ASSERT_TRUE(logs.AppendAt("job-1", 0, 1, "stdout", 0, "a").ok());
  ASSERT_TRUE(logs.AppendAt("job-1", 0, 2, "stdout", 0, "b").ok());
  ASSERT_TRUE(logs.AppendAt("job-1", 0, 1, "stdout", 0, "a").ok());  // still known
  EXPECT_EQ(all(), "ab");
  ASSERT_TRUE(logs.AppendAt("job-1", 0, 3, "stdout", 0, "c").ok());  // generation 1 is forgotten
  ASSERT_TRUE(logs.AppendAt("job-1", 0, 2, "stdout", 0, "b").ok());  // 2 is not
  EXPECT_EQ(all(), "abc");
  ASSERT_TRUE(logs.AppendAt("job-1", 0, 1, "stdout", 0, "a").ok());
  EXPECT_EQ(all(), "abca");
  logs.RemoveJob("job-1");
  ASSERT_TRUE(logs.AppendAt("job-1", 0, 3, "stdout", 0, "c").ok());  // a new file, a fresh start
  EXPECT_EQ(all(), "c");
}

// A coordinator killed after writing a chunk and before its receipt: the
// worker resends it to the next process, which reads the ends it left in
// rank-<r>.ends and writes only what is new. A slot file that is damaged
// is ignored (the resend is written again, as before there was one).
TEST_F(JobLogsTest, AChunkResentAcrossARestartIsWrittenOnce) {
  {
    JobLogs before({root_});
    ASSERT_TRUE(before.AppendAt("job-1", 0, 1, "stdout", 0, "step 1\n").ok());
    ASSERT_TRUE(before.AppendAt("job-1", 0, 1, "stderr", 0, "warn\n").ok());
    ASSERT_TRUE(before.AppendAt("job-1", 0, 2, "stdout", 0, "gen 2\n").ok());
    ASSERT_TRUE(before.AppendAt("job-1", 0, 2, "stdout", 6, "more\n").ok());
  }
  JobLogs after({root_});
  auto all = [&] { return after.Read("job-1", 0, 0, 1000)->data; };
  const std::string was = "step 1\nwarn\ngen 2\nmore\n";
  EXPECT_EQ(*after.AppendAt("job-1", 0, 2, "stdout", 6, "more\n"), 11);
  EXPECT_EQ(*after.AppendAt("job-1", 0, 2, "stdout", 0, "gen 2\nmore\n"), 11);
  EXPECT_EQ(*after.AppendAt("job-1", 0, 1, "stderr", 0, "warn\n"), 5);
  EXPECT_EQ(*after.AppendAt("job-1", 0, 1, "stdout", 0, "step 1\n"), 7);
  EXPECT_EQ(all(), was);
  EXPECT_EQ(*after.AppendAt("job-1", 0, 2, "stdout", 6, "more\nlast\n"), 16);
  EXPECT_EQ(all(), was + "last\n");
  // A late chunk of generation 0 (older than the two newest) does not take
  // generation 2's slot: after another restart, 2's resend is still known.
  EXPECT_EQ(*after.AppendAt("job-1", 0, 0, "stdout", 0, "old\n"), 4);
  {
    JobLogs again({root_});
    EXPECT_EQ(*again.AppendAt("job-1", 0, 2, "stdout", 6, "more\nlast\n"), 16);
    EXPECT_EQ(again.Read("job-1", 0, 0, 1000)->data, was + "last\nold\n");
  }
  std::string now = was + "last\nold\n";
  // The slot file is not a log: Ranks lists rank 0 only.
  EXPECT_EQ(*after.Ranks("job-1"), std::vector<int>{0});
  // Damaged slots: ignored, the resend written again.
  std::ofstream(root_ + "/job-1/rank-0.ends", std::ios::trunc) << std::string(200, '9');
  JobLogs damaged({root_});
  EXPECT_EQ(*damaged.AppendAt("job-1", 0, 2, "stdout", 11, "last\n"), 16);
  EXPECT_EQ(damaged.Read("job-1", 0, 0, 1000)->data, now + "last\n");
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
