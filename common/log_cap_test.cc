#include "common/log_cap.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace frameworm {
namespace {

std::string Pattern(int64_t from, int64_t n) {
  std::string s(n, '\0');
  for (int64_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (from + i) % 26);
  return s;
}

TEST(LogCapTest, DropsTheHeadKeepsOffsetsAndFreesTheSpace) {
  const std::string path = ::testing::TempDir() + "/cap-" + std::to_string(::getpid());
  const int64_t total = 20 * kLogCapBlock;
  { std::ofstream(path, std::ios::binary) << Pattern(0, total); }
  // Under the cap: nothing changes.
  EXPECT_EQ(*CapLog(path, total), 0);
  absl::StatusOr<int64_t> first = CapLog(path, 8 * kLogCapBlock);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 16 * kLogCapBlock);  // about max/2 = 4 blocks kept
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)), total);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_LE(st.st_blocks * 512, 5 * kLogCapBlock);  // the space is back
  // Readers skip the hole; the bytes kept are the original ones at their offsets.
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_EQ(FirstKept(fd, 0), *first);
  EXPECT_EQ(FirstKept(fd, *first + 10), *first + 10);
  // Past the end nothing was dropped: a reader there (a follower whose
  // offset is ahead of a log that lost its tail) is not moved back.
  EXPECT_EQ(FirstKept(fd, total + 5), total + 5);
  std::string tail(total - *first, '\0');
  ASSERT_EQ(::pread(fd, tail.data(), tail.size(), *first), static_cast<ssize_t>(tail.size()));
  EXPECT_EQ(tail, Pattern(*first, total - *first));
  ::close(fd);
  // Nothing at or after keep_from is dropped.
  { std::ofstream(path, std::ios::binary | std::ios::app) << Pattern(total, 8 * kLogCapBlock); }
  EXPECT_EQ(*CapLog(path, 8 * kLogCapBlock, 17 * kLogCapBlock + 5), 17 * kLogCapBlock);
  EXPECT_EQ(*CapLog(path, 8 * kLogCapBlock, 3), 17 * kLogCapBlock);  // below the hole: no-op
  // Appending goes on at the old end; a second cap drops more.
  { std::ofstream(path, std::ios::binary | std::ios::app) << Pattern(total, 8 * kLogCapBlock); }
  EXPECT_EQ(*CapLog(path, 8 * kLogCapBlock), 32 * kLogCapBlock);
  std::filesystem::remove(path);
  EXPECT_EQ(CapLog(path, 1).status().code(), absl::StatusCode::kInternal);  // names the file
  EXPECT_NE(CapLog(path, 1).status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace frameworm
