#include "common/queued_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include "common/crc32.h"
#include "common/received_file.h"
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

// ReceivedFile's ranges (a fetch in several streams): written out of order
// from several threads, committed with the joined CRC; writes outside the
// declared size, mixing ranges with in-order appends, and a missing range
// are refused, and nothing stays.
TEST_F(QueuedFileTest, ARangedFileIsWrittenOutOfOrderAndCheckedWhole) {
  const std::string path = base_ + "/ck/ckpt-9.pt";
  const std::string want = Chunk(3 * kMaxChunkBytes + 17, 9);
  const int64_t size = static_cast<int64_t>(want.size());
  auto f = ReceivedFile::Create(path, size);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<std::thread> threads;
  for (int64_t at = size; at > 0;) {  // last chunk first
    const int64_t from = (at - 1) / kMaxChunkBytes * kMaxChunkBytes;
    threads.emplace_back([&, from, at] {
      EXPECT_TRUE((*f)->WriteAt(from, want.data() + from, static_cast<size_t>(at - from)).ok());
    });
    at = from;
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ((*f)->Append("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*f)->Commit("crc32:00000000").code(), absl::StatusCode::kFailedPrecondition);
  const uint32_t a = Crc32(0, want.data(), kMaxChunkBytes);
  const uint32_t b = Crc32(0, want.data() + kMaxChunkBytes, want.size() - kMaxChunkBytes);
  const uint32_t whole = Crc32Combine(a, b, size - kMaxChunkBytes);
  EXPECT_EQ((*f)->CommitRanges(whole ^ 1, Crc32Text(whole)).code(),
            absl::StatusCode::kInvalidArgument);
  f = ReceivedFile::Create(path, size);
  ASSERT_TRUE(f.ok());
  for (const auto& [at, n] : std::vector<std::pair<int64_t, size_t>>{
           {-1, 1}, {size, 1}, {size - 3, 4}, {0, static_cast<size_t>(kMaxChunkBytes) + 1}}) {
    EXPECT_EQ((*f)->WriteAt(at, want.data(), n).code(), absl::StatusCode::kInvalidArgument) << at;
  }
  ASSERT_TRUE((*f)->WriteAt(0, want.data(), kMaxChunkBytes).ok());
  absl::Status s = (*f)->CommitRanges(whole, Crc32Text(whole));  // the rest never came
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  f->reset();
  EXPECT_EQ(FilesBeside(path), 0u) << "a refused file leaves nothing once dropped";
  f = ReceivedFile::Create(path, size);
  ASSERT_TRUE(f.ok());
  for (int64_t at = 0; at < size; at += kMaxChunkBytes) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kMaxChunkBytes, size - at));
    ASSERT_TRUE((*f)->WriteAt(at, want.data() + at, n).ok());
  }
  ASSERT_TRUE((*f)->CommitRanges(whole, Crc32Text(whole)).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(got == want);
  EXPECT_EQ(FilesBeside(path), 1u);
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// A copy "already in place" is a regular file at the path itself: a FIFO
// put there is refused at once (never waited on), and so is a symlink to a
// matching file; FileChecksum refuses a FIFO as well.
TEST(FileMatchesTest, OnlyARegularFileAtThePathItselfMatches) {
  const std::string base =
      (fs::temp_directory_path() / ("fw-matches-" + std::to_string(::getpid()))).string();
  fs::remove_all(base);
  fs::create_directories(base);
  const std::string data = Chunk(5000, 3);
  std::ofstream(base + "/ckpt-1.pt", std::ios::binary) << data;
  const std::string sum = Crc32Text(Crc32(0, data.data(), data.size()));
  EXPECT_TRUE(FileMatches(base + "/ckpt-1.pt", 5000, sum));
  EXPECT_FALSE(FileMatches(base + "/ckpt-1.pt", 4999, sum));
  EXPECT_FALSE(FileMatches(base + "/ckpt-1.pt", 5000, "crc32:00000000"));
  fs::create_symlink(base + "/ckpt-1.pt", base + "/ckpt-2.pt");
  EXPECT_FALSE(FileMatches(base + "/ckpt-2.pt", 5000, sum));
  ASSERT_EQ(::mkfifo((base + "/ckpt-3.pt").c_str(), 0600), 0);
  EXPECT_FALSE(FileMatches(base + "/ckpt-3.pt", 0, Crc32Text(0)));
  absl::StatusOr<std::pair<int64_t, std::string>> fifo = FileChecksum(base + "/ckpt-3.pt");
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::pair<int64_t, std::string>> whole = FileChecksum(base + "/ckpt-1.pt");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->first, 5000);
  EXPECT_EQ(whole->second, sum);
  fs::remove_all(base);
}

}  // namespace
}  // namespace frameworm
