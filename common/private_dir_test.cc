#include "common/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "gtest/gtest.h"

namespace frameworm {
namespace {
namespace fs = std::filesystem;

class PrivateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() / ("fw-private-" + std::to_string(::getpid()))).string();
    fs::remove_all(base_);
    fs::create_directories(base_);
  }
  void TearDown() override { fs::remove_all(base_); }
  std::string base_;
};

TEST_F(PrivateDirTest, AMissingDirectoryIsMadeForThisUserAlone) {
  const std::string dir = base_ + "/a/b";
  ASSERT_TRUE(EnsurePrivateDirectory(dir).ok());
  struct stat st;
  ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(EnsurePrivateDirectory(dir).ok()) << "an existing one of ours is fine";
}

TEST_F(PrivateDirTest, ASymlinkAnOpenDirectoryOrAStrangersDirectoryIsRefused) {
  fs::create_directories(base_ + "/target");
  fs::create_directory_symlink(base_ + "/target", base_ + "/link");
  absl::Status s = EnsurePrivateDirectory(base_ + "/link");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s;

  fs::create_directories(base_ + "/open");
  ::chmod((base_ + "/open").c_str(), 0777);
  s = EnsurePrivateDirectory(base_ + "/open");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("writable by other users"), std::string::npos) << s;

  if (::geteuid() == 0) {  // root can give one away (CI runs as root)
    fs::create_directories(base_ + "/theirs");
    ASSERT_EQ(::chown((base_ + "/theirs").c_str(), 65534, 65534), 0);
    s = EnsurePrivateDirectory(base_ + "/theirs");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("belongs to uid 65534"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace frameworm
