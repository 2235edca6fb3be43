#include "coordinator/checkpoint_copies.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "coordinator/test_dir.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {
namespace fs = std::filesystem;

class CheckpointCopiesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = FreshTestDir("copies"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Files under the root (partial ones included).
  int FilesUnderRoot() {
    int n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_ + "/root", ec);
         it != fs::recursive_directory_iterator(); ++it)
      n += it->is_regular_file() ? 1 : 0;
    return n;
  }
  std::string dir_;
};

TEST_F(CheckpointCopiesTest, ChunksCommitIntoPlaceAndAreFoundByStep) {
  CheckpointCopies copies(dir_ + "/root", 100);
  auto in = copies.Begin("job-000001", 20, 8);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(copies.PathOf("job-000001", 20).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*in)->Append("da").ok());
  ASSERT_TRUE((*in)->Append("tadata").ok());
  ASSERT_TRUE((*in)->Commit("crc32:a4140b2c").ok());  // crc32("datadata")
  in->reset();
  auto p = copies.PathOf("job-000001", 20);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, dir_ + "/root/job-000001/ckpt-20.pt");
  EXPECT_EQ(Read(*p), "datadata");
  EXPECT_EQ(FilesUnderRoot(), 1);
  copies.Remove("job-000001", 20);
  EXPECT_FALSE(fs::exists(*p));
}

// A copy found damaged: its mark names the generation, the copy goes, and
// Remove takes the mark too; a mark that does not parse names none.
TEST_F(CheckpointCopiesTest, ADamagedCopyIsMarkedThenRemoved) {
  CheckpointCopies copies(dir_ + "/root", 100);
  auto in = copies.Begin("job-000001", 20, 4);
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_TRUE((*in)->Append("data").ok());
  ASSERT_TRUE((*in)->Commit("crc32:adf3f363").ok());
  in->reset();
  EXPECT_EQ(*copies.DamagedIn("job-000001", 20), -1);
  ASSERT_TRUE(copies.MarkDamaged("job-000001", 20, 7).ok());
  EXPECT_EQ(copies.PathOf("job-000001", 20).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*copies.DamagedIn("job-000001", 20), 7);
  EXPECT_EQ(FilesUnderRoot(), 1) << "the mark alone, no partial file";
  for (const char* junk : {"", "-3\n", "seven\n", "123456789012345678901234567890\n"}) {
    std::ofstream(dir_ + "/root/job-000001/ckpt-20.pt.damaged", std::ios::trunc) << junk;
    EXPECT_EQ(*copies.DamagedIn("job-000001", 20), -1) << junk;
  }
  copies.Remove("job-000001", 20);
  EXPECT_EQ(FilesUnderRoot(), 0);
  EXPECT_EQ(*copies.DamagedIn("../etc", 20), -1);
  EXPECT_FALSE(copies.MarkDamaged("../etc", 20, 1).ok());
  // A mark that cannot be written (a directory in its place) is INTERNAL,
  // and the damaged copy is removed all the same.
  auto other = copies.Begin("job-000002", 20, 4);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->Append("data").ok());
  ASSERT_TRUE((*other)->Commit("crc32:adf3f363").ok());
  other->reset();
  fs::create_directories(dir_ + "/root/job-000002/ckpt-20.pt.damaged");
  EXPECT_EQ(copies.MarkDamaged("job-000002", 20, 1).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(copies.PathOf("job-000002", 20).status().code(), absl::StatusCode::kNotFound);
  // A mark that can never be read (that directory) is no mark; one that
  // cannot be read now (no descriptor to spare) is UNAVAILABLE.
  EXPECT_EQ(*copies.DamagedIn("job-000002", 20), -1);
  absl::StatusOr<int64_t> now = -1;
  WithoutFreeDescriptors([&] { now = copies.DamagedIn("job-000002", 20); });
  EXPECT_EQ(now.status().code(), absl::StatusCode::kUnavailable) << now.status();
  EXPECT_EQ(FilesUnderRoot(), 0) << "no partial mark left";
}

// What a process that died mid-upload left (its partial file) is removed
// at the next start; complete copies and other files stay.
TEST_F(CheckpointCopiesTest, PartialFilesOfADeadProcessAreRemovedAtStart) {
  CheckpointCopies copies(dir_ + "/root", 100);
  auto in = copies.Begin("job-000001", 20, 8);
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_TRUE((*in)->Append("data").ok());
  auto done = copies.Begin("job-000002", 5, 4);
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE((*done)->Append("data").ok());
  ASSERT_TRUE((*done)->Commit("crc32:adf3f363").ok());  // crc32("data")
  std::ofstream(dir_ + "/root/job-000002/notes.txt") << "x";
  EXPECT_EQ(FilesUnderRoot(), 3);
  copies.RemovePartials();  // as the next process starts
  EXPECT_EQ(FilesUnderRoot(), 2);
  EXPECT_TRUE(copies.PathOf("job-000002", 5).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/root/job-000002/notes.txt"));
  in->reset();
}

TEST_F(CheckpointCopiesTest, BadUploadsLeaveNothingAndNameTheProblem) {
  CheckpointCopies copies(dir_ + "/root", 100);
  {  // more than declared
    auto in = copies.Begin("j", 1, 3);
    ASSERT_TRUE(in.ok());
    absl::Status s = (*in)->Append("abcd");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("3 bytes"), std::string::npos) << s;
  }
  {  // fewer than declared
    auto in = copies.Begin("j", 1, 3);
    ASSERT_TRUE(in.ok());
    ASSERT_TRUE((*in)->Append("ab").ok());
    absl::Status s = (*in)->Commit("crc32:00000000");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("after 2 of the 3"), std::string::npos) << s;
  }
  {  // wrong checksum
    auto in = copies.Begin("j", 1, 4);
    ASSERT_TRUE(in.ok());
    ASSERT_TRUE((*in)->Append("data").ok());
    absl::Status s = (*in)->Commit("crc32:deadbeef");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("crc32:adf3f363"), std::string::npos) << s;
  }
  {  // abandoned mid-way (the client went away)
    auto in = copies.Begin("j", 2, 4);
    ASSERT_TRUE(in.ok());
    ASSERT_TRUE((*in)->Append("da").ok());
  }
  EXPECT_EQ(FilesUnderRoot(), 0);
  EXPECT_EQ(copies.PathOf("j", 1).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointCopiesTest, RefusesUnsafeJobIdsBadStepsAndOversizedCopies) {
  CheckpointCopies copies(dir_ + "/root", 100);
  for (const std::string& id : std::vector<std::string>{"", "..", ".", "../../etc", "a/b", std::string(65, 'x')}) {
    auto in = copies.Begin(id, 1, 1);
    EXPECT_EQ(in.status().code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_EQ(copies.PathOf(id, 1).status().code(), absl::StatusCode::kInvalidArgument) << id;
  }
  EXPECT_EQ(copies.Begin("j", -1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  auto big = copies.Begin("j", 1, 101);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("at most 100 bytes"), std::string::npos);
  auto in = copies.Begin("j", 1, 100);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ((*in)->Append(std::string(kMaxChunkBytes + 1, 'x')).code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing outside the root: the directory above is untouched.
  std::ofstream(dir_ + "/outside") << "keep";
  copies.RemoveJob("..");
  EXPECT_TRUE(fs::exists(dir_ + "/outside"));
}

}  // namespace
}  // namespace frameworm::coordinator
