#include "common/queued_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "common/crc32.h"
#include "gtest/gtest.h"

namespace frameworm {
namespace {
namespace fs = std::filesystem;

class QueuedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() / ("fw-queued-" + std::to_string(::getpid()))).string();
    fs::remove_all(base_);
  }
  void TearDown() override { fs::remove_all(base_); }
  // Files in the directory of `path` (a partial file left behind shows).
  size_t FilesBeside(const std::string& path) {
    const fs::path dir = fs::path(path).parent_path();
    if (!fs::exists(dir)) return 0;
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
  }
  std::string base_;
};

std::string Chunk(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

TEST_F(QueuedFileTest, ChunksLandInOrderAndTheFileAppearsOnlyAtCommit) {
  const std::string path = base_ + "/ck/ckpt-7.pt";
  std::string want;
  std::vector<std::string> chunks;
  for (unsigned i = 0; i < 40; ++i) {
    chunks.push_back(Chunk(i % 3 == 0 ? kMaxChunkBytes : 1000 + i * 37, i));
    want += chunks.back();
  }
  auto f = QueuedFile::Create(path, static_cast<int64_t>(want.size()), 2);
  ASSERT_TRUE(f.ok()) << f.status();
  bool reused = false;
  for (std::string& c : chunks) {
    std::string spare = (*f)->Spare();
    reused = reused || spare.capacity() >= 1000;
    EXPECT_TRUE(spare.empty());
    ASSERT_TRUE((*f)->Append(std::move(c)).ok());
  }
  EXPECT_TRUE(reused) << "written chunks' buffers come back through Spare";
  EXPECT_FALSE(fs::exists(path)) << "not visible before Commit";
  const std::string sum = Crc32Text(Crc32(0, want.data(), want.size()));
  ASSERT_TRUE((*f)->Commit(sum).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(got == want);
  EXPECT_EQ(FilesBeside(path), 1u) << "no partial file left";
}

TEST_F(QueuedFileTest, AWrongChecksumIsRefusedAndLeavesNothing) {
  const std::string path = base_ + "/ck/ckpt-1.pt";
  auto f = QueuedFile::Create(path, 5000);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->Append(Chunk(5000, 1)).ok());
  absl::Status s = (*f)->Commit("crc32:00000000");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("does not match"), std::string::npos) << s;
  f->reset();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(FilesBeside(path), 0u);
}

TEST_F(QueuedFileTest, TheWritersErrorComesBackAndLaterChunksAreDropped) {
  const std::string path = base_ + "/ck/ckpt-2.pt";
  auto f = QueuedFile::Create(path, 3000, 1);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->Append(Chunk(2000, 1)).ok());
  // More than declared: the writer refuses it; the caller learns at the
  // next Append or at Commit, whichever comes first.
  absl::Status first = (*f)->Append(Chunk(2000, 2));
  absl::Status later = first;
  for (int i = 0; i < 5 && later.ok(); ++i) later = (*f)->Append(Chunk(10, 3));
  absl::Status commit = (*f)->Commit("crc32:00000000");
  EXPECT_EQ(commit.code(), absl::StatusCode::kInvalidArgument) << commit;
  EXPECT_NE(commit.message().find("more than the 3000 bytes"), std::string::npos) << commit;
  EXPECT_EQ(later.code(), absl::StatusCode::kInvalidArgument) << later;
  f->reset();
  EXPECT_EQ(FilesBeside(path), 0u) << "the partial file is removed";
}

TEST_F(QueuedFileTest, DestroyedBeforeCommitRemovesThePartialFile) {
  const std::string path = base_ + "/ck/ckpt-3.pt";
  auto f = QueuedFile::Create(path, int64_t{8} * kMaxChunkBytes, 4);
  ASSERT_TRUE(f.ok()) << f.status();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*f)->Append(Chunk(kMaxChunkBytes, i)).ok());
  f->reset();  // mid-transfer: a cancelled fetch
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(FilesBeside(path), 0u);
}

TEST_F(QueuedFileTest, BadArgumentsAndAnUnwritableDirectoryAreErrors) {
  EXPECT_EQ(QueuedFile::Create(base_ + "/x", 10, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  fs::create_directories(base_);
  { std::ofstream(base_ + "/file") << "x"; }
  auto f = QueuedFile::Create(base_ + "/file/ckpt-1.pt", 10);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInternal) << f.status();
}

}  // namespace
}  // namespace frameworm
