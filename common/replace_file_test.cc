// ReplaceFile against the real filesystem: the new contents replace the
// old whole with no temporary file left; a directory that is not there is
// INTERNAL naming the file, and nothing is written.
#include "common/replace_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace frameworm {
namespace {

namespace fs = std::filesystem;

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream all;
  all << f.rdbuf();
  return all.str();
}

TEST(ReplaceFile, ReplacesWholeAndLeavesNoTemporaryFile) {
  const std::string dir = ::testing::TempDir() + "/replace-file-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/state";
  ASSERT_TRUE(ReplaceFile(path, "a longer first version\n").ok());
  ASSERT_TRUE(ReplaceFile(path, "second\n").ok());
  EXPECT_EQ(Read(path), "second\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  const absl::Status s = ReplaceFile(dir + "/no-such-dir/state", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("no-such-dir/state"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir + "/no-such-dir"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace frameworm
