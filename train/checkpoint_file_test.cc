// CheckpointFileWriter's write paths on real filesystems: O_DIRECT where the
// filesystem takes it (the test's temporary directory), buffered where it
// does not (a ramfs in a private mount namespace: the test re-runs itself
// under unshare -m, as root can; if that is impossible it fails saying
// why), and running out of memory for its buffers.
#include "train/checkpoint_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "train/test_util.h"

namespace frameworm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

using testutil::LimitAddressSpace;
using testutil::SelfExe;

// True when `dir` takes O_DIRECT opens (what the writer asks of it).
bool TakesDirectIo(const std::string& dir) {
  const std::string probe = dir + "/probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  ::close(fd);
  const int d = ::open(probe.c_str(), O_WRONLY | O_DIRECT);
  if (d >= 0) ::close(d);
  ::unlink(probe.c_str());
  return d >= 0;
}

// Payloads around the alignment (4 KiB, with the 24-byte header in front)
// and buffer (8 MiB) boundaries, appended in uneven pieces, read back equal;
// the whole-file checksum is zlib's CRC-32 of the file.
void RoundTripsAtEveryBoundary(const std::string& dir, bool want_direct) {
  std::mt19937_64 rng(7);
  const std::vector<size_t> sizes = {0, 1, 4072, 4073, 8 * kMiB - 24, 8 * kMiB - 23,
                                     8 * kMiB, 2 * 8 * kMiB + 4097};
  for (size_t n : sizes) {
    std::string payload(n, '\0');
    for (char& c : payload) c = static_cast<char>(rng());
    const std::string path = dir + "/ckpt-" + std::to_string(n) + ".pt";
    auto w = CheckpointFileWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->direct_io(), want_direct) << dir;
    size_t at = 0;
    for (size_t piece : {size_t{5}, size_t{4096}, 3 * kMiB + 1}) {
      const size_t k = std::min(piece, n - at);
      ASSERT_TRUE((*w)->Append(payload.data() + at, k).ok());
      at += k;
    }
    ASSERT_TRUE((*w)->Append(payload.data() + at, n - at).ok());
    auto info = (*w)->Commit();
    ASSERT_TRUE(info.ok()) << info.status();
    const std::string file = Slurp(path);
    EXPECT_EQ(info->bytes, static_cast<int64_t>(file.size())) << n;
    EXPECT_EQ(info->checksum,
              absl::StrFormat("crc32:%08x",
                              crc32(0, reinterpret_cast<const Bytef*>(file.data()), file.size())))
        << n;
    auto back = ReadCheckpointFile(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == payload) << "payload of " << n << " bytes differs";
    EXPECT_FALSE(std::ifstream(path + ".tmp." + std::to_string(::getpid())).good());
  }
}

TEST(CheckpointFileTest, DirectWritesRoundTripAtEveryBoundary) {
  const std::string dir = testutil::MakeTempDir("ckfile");
  RoundTripsAtEveryBoundary(dir, TakesDirectIo(dir));
  testutil::RemoveTree(dir);
}

TEST(CheckpointFileTest, AFilesystemWithoutDirectIoGetsBufferedWrites) {
  if (const char* ramfs = std::getenv("FRAMEWORM_RAMFS_DIR")) {
    ASSERT_FALSE(TakesDirectIo(ramfs)) << ramfs << " takes O_DIRECT: not the case to test";
    RoundTripsAtEveryBoundary(ramfs, /*want_direct=*/false);
    return;
  }
  const std::string dir = testutil::MakeTempDir("ckramfs");
  const std::string exe = SelfExe();
  const std::string cmd =
      "unshare -m --propagation private sh -c 'mount -t ramfs frameworm-ramfs " + dir +
      " && FRAMEWORM_RAMFS_DIR=" + dir + " exec " + exe +
      " --gtest_filter=CheckpointFileTest.AFilesystemWithoutDirectIoGetsBufferedWrites' > " + dir +
      ".log 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string log = Slurp(dir + ".log");
  std::remove((dir + ".log").c_str());
  testutil::RemoveTree(dir);
  ASSERT_EQ(rc, 0) << "a private mount namespace with a ramfs is needed (root and unshare(1)); "
                      "the run said:\n" << log;
  EXPECT_NE(log.find("[  PASSED  ] 1 test"), std::string::npos) << log;
}

// No memory for the write buffers (an address-space limit, in a fresh
// process running this test alone, so no freed memory is at hand): Open
// fails with RESOURCE_EXHAUSTED naming the file and leaves no temporary
// file.
TEST(CheckpointFileTest, NoMemoryForBuffersIsANamedErrorAndLeavesNoFile) {
  if (const char* dir = std::getenv("FRAMEWORM_NOMEM_DIR")) {
    const std::string path = std::string(dir) + "/ckpt-1.pt";
    ASSERT_TRUE(LimitAddressSpace(2048));  // 2 MiB to spare
    auto w = CheckpointFileWriter::Open(path);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
    EXPECT_NE(w.status().message().find(path), std::string::npos) << w.status();
    EXPECT_FALSE(std::ifstream(path + ".tmp." + std::to_string(::getpid())).good());
    return;
  }
  const std::string dir = testutil::MakeTempDir("cknomem");
  const testutil::ChildRun child = testutil::RunThisTestAgain("FRAMEWORM_NOMEM_DIR=" + dir);
  EXPECT_EQ(child.rc, 0) << child.log;
  EXPECT_NE(child.log.find("[  PASSED  ] 1 test"), std::string::npos) << child.log;
  EXPECT_FALSE(std::ifstream(dir + "/ckpt-1.pt").good());
  testutil::RemoveTree(dir);
}

// A checkpoint path that names a FIFO, a device or a directory is refused
// as not a regular file at once (opening a FIFO waits for no writer).
TEST(CheckpointFileTest, WhatIsNotARegularFileIsRefusedWithoutWaiting) {
  const std::string dir = testutil::MakeTempDir("ckfifo");
  const std::string fifo = dir + "/ckpt-5.pt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& p : {fifo, std::string("/dev/zero"), dir}) {
    absl::StatusOr<std::string> r = ReadCheckpointFile(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos) << r.status();
  }
  testutil::RemoveTree(dir);
}

// What writers that died left in a checkpoint directory (their pids are
// gone) goes, whichever temporary name they wrote under; the files of a
// live writer, checkpoints and other names stay.
TEST(CheckpointFileTest, StaleTemporaryFilesOfEveryKindAreRemoved) {
  const std::string dir = testutil::MakeTempDir("ckstale");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string dead = std::to_string(child), live = std::to_string(::getppid());
  const std::vector<std::string> stale = {"ckpt-4.pt.tmp." + dead, "ckpt-4.pt.download-" + dead,
                                          "ckpt-4.pt.refetch-" + dead, "ckpt-4.pt.rank3-" + dead};
  const std::vector<std::string> kept = {"ckpt-4.pt", "ckpt-4.pt.tmp." + live,
                                         "ckpt-4.pt.download-" + live, "ckpt-4.pt.rank1-" + live,
                                         "ckpt-4.pt.rank-" + dead, "ckpt-4.pt.rankx-" + dead,
                                         "notes.download-", ".tmp." + dead};
  for (const auto& n : stale) std::ofstream(dir + "/" + n) << "x";
  for (const auto& n : kept) std::ofstream(dir + "/" + n) << "x";
  EXPECT_EQ(RemoveStaleCheckpointTemps(dir), static_cast<int>(stale.size()));
  for (const auto& n : stale) EXPECT_FALSE(std::ifstream(dir + "/" + n).good()) << n;
  for (const auto& n : kept) EXPECT_TRUE(std::ifstream(dir + "/" + n).good()) << n;
  testutil::RemoveTree(dir);
}

// A checkpoint whose payload is larger than the memory this process may
// take (a sparse 1 GiB file with a valid header, read under an address-space
// limit in a fresh process): RESOURCE_EXHAUSTED naming the file, no abort.
TEST(CheckpointFileTest, APayloadLargerThanMemoryIsANamedErrorNotAnAbort) {
  if (const char* file = std::getenv("FRAMEWORM_BIGCKPT_FILE")) {
    ASSERT_TRUE(LimitAddressSpace(64 * 1024));  // 64 MiB to spare
    auto back = ReadCheckpointFile(file);
    ASSERT_FALSE(back.ok());
    EXPECT_EQ(back.status().code(), absl::StatusCode::kResourceExhausted) << back.status();
    EXPECT_NE(back.status().message().find(file), std::string::npos) << back.status();
    return;
  }
  const std::string dir = testutil::MakeTempDir("ckbig");
  const std::string path = dir + "/ckpt-1.pt";
  const uint64_t len = uint64_t{1} << 30;
  char header[24] = {'F', 'W', 'C', 'K', 'P', 'T', '0', '1'};
  for (int i = 0; i < 8; ++i) header[8 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(header, sizeof(header));
  }
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(sizeof(header) + len)), 0);
  const testutil::ChildRun child = testutil::RunThisTestAgain("FRAMEWORM_BIGCKPT_FILE=" + path);
  EXPECT_EQ(child.rc, 0) << child.log;
  EXPECT_NE(child.log.find("[  PASSED  ] 1 test"), std::string::npos) << child.log;
  testutil::RemoveTree(dir);
}

}  // namespace
}  // namespace frameworm
