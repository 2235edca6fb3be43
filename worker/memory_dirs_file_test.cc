// The worker's list of watched memory directories (worker/memory_dirs_file.h)
// on real files.
#include "worker/memory_dirs_file.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace frameworm {
namespace {

namespace fs = std::filesystem;

class MemoryDirsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "memory-dirs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(MemoryDirsFileTest, WhatIsWrittenIsReadBackAndNoFileIsAnEmptyList) {
  const std::string path = dir_ + "/memory-dirs";
  auto none = ReadMemoryDirsFile(path);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  const std::vector<WatchedMemoryDir> dirs = {{"job-1", "/dev/shm/fw/job-1-100"},
                                              {"j\tb\n", "/dev/shm/fw/with\ttab\nand newline"}};
  ASSERT_TRUE(WriteMemoryDirsFile(path, dirs).ok());
  auto back = ReadMemoryDirsFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, dirs);
  ASSERT_TRUE(WriteMemoryDirsFile(path, {}).ok());
  back = ReadMemoryDirsFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->empty());
}

TEST_F(MemoryDirsFileTest, LinesThatDoNotParseAreSkippedAndTheListIsBounded) {
  const std::string path = dir_ + "/memory-dirs";
  {
    std::ofstream out(path);
    out << "v1\t6a6f622d31\t2f612f62\n"        // job-1, /a/b
        << "v2\t6a6f622d31\t2f612f63\n"        // another version
        << "v1\t6a6f622d3\t2f612f64\n"         // odd hex
        << "v1\t6a6f622d31\t2f612f6g\n"        // not hex
        << "v1\t6a6f622d31\n"                  // a field short
        << "v1\t6a6f622d31\t\n"                // no dir
        << "v1\t6a6f622d31\t2f612f65\textra\n"  // a field more
        << "garbage\n";
  }
  auto back = ReadMemoryDirsFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, (std::vector<WatchedMemoryDir>{{"job-1", "/a/b"}}));

  std::vector<WatchedMemoryDir> many;
  for (size_t i = 0; i < MemoryDirSweeper::kMaxDirs + 5; ++i) {
    many.push_back({"job", absl::StrCat("/dev/shm/fw/job-", i)});
  }
  ASSERT_TRUE(WriteMemoryDirsFile(path, many).ok());
  back = ReadMemoryDirsFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), MemoryDirSweeper::kMaxDirs);
}

TEST_F(MemoryDirsFileTest, APathThatIsNotAFileIsAnErrorNamingIt) {
  const std::string path = dir_ + "/memory-dirs";
  fs::create_directories(path);
  auto back = ReadMemoryDirsFile(path);
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(back.status().message(), ::testing::HasSubstr(path));
  EXPECT_FALSE(WriteMemoryDirsFile(path, {{"job-1", "/a/b"}}).ok());
}

}  // namespace
}  // namespace frameworm
