// MemoryDirSweeper on real directories and files (worker/memory_dir_sweeper.h).
#include "worker/memory_dir_sweeper.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace frameworm {
namespace {

namespace fs = std::filesystem;

std::string MakeBase() {
  std::string t = (fs::temp_directory_path() / "memory-sweep-XXXXXX").string();
  EXPECT_NE(::mkdtemp(t.data()), nullptr);
  return t;
}

// A file of `path` last changed at `when`.
void Write(const std::string& path, absl::Time when) {
  std::ofstream(path) << "x";
  const timespec ts = absl::ToTimespec(when);
  const timespec times[2] = {ts, ts};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

using Launch = MemoryDirSweeper::Launch;
auto Never = [](const std::string&) { return false; };
auto NeverBusy = [](const std::string&, const std::string&) { return false; };

TEST(MemoryDirSweeper, RemovesOnlyUnheldCheckpointFilesOnceTheJobIsQuiet) {
  const std::string base = MakeBase();
  const std::string dir = base + "/job-1-100";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const absl::Time t0 = absl::Now();
  const absl::Time old = t0 - absl::Hours(1), fresh = t0 + absl::Hours(1);
  Write(dir + "/ckpt-5.pt", old);              // a snapshot never reported
  Write(dir + "/ckpt-10.pt", old);             // held
  Write(dir + "/ckpt-15.pt.tmp.4242", old);    // a killed writer's partial file
  Write(dir + "/ckpt-20.pt", fresh);           // too new
  Write(dir + "/notes.txt", old);              // not a checkpoint's name
  Write(dir + "/ckpt-x.pt", old);              // nor this
  Write(base + "/outside", old);
  ASSERT_EQ(::symlink((base + "/outside").c_str(), (dir + "/ckpt-25.pt").c_str()), 0);
  ASSERT_EQ(::mkdir((dir + "/ckpt-30.pt").c_str(), 0700), 0);

  MemoryDirSweeper sweeper(absl::Minutes(1));
  ASSERT_EQ(sweeper.Launched("job-1", dir, t0), Launch::kChanged);
  auto held = [&](const std::string& p) { return p == dir + "/ckpt-10.pt"; };
  std::string busy_job;
  auto busy = [&](const std::string& job, const std::string& d) {
    EXPECT_EQ(d, dir);
    return job == busy_job;
  };
  EXPECT_TRUE(sweeper.Sweep(t0 + absl::Seconds(30), busy, held).empty()) << "not quiet yet";
  busy_job = "job-1";  // a task of it runs again, or a fetch into it is pending
  EXPECT_TRUE(sweeper.Sweep(t0 + absl::Seconds(50), busy, held).empty());
  busy_job = "";
  EXPECT_TRUE(sweeper.Sweep(t0 + absl::Seconds(100), busy, held).empty())
      << "its quiet time starts again from the last busy sweep";
  const std::vector<std::string> removed = sweeper.Sweep(t0 + absl::Seconds(111), busy, held);
  EXPECT_EQ(std::set<std::string>(removed.begin(), removed.end()),
            (std::set<std::string>{dir + "/ckpt-5.pt", dir + "/ckpt-15.pt.tmp.4242"}));
  EXPECT_EQ(Names(dir), (std::set<std::string>{"ckpt-10.pt", "ckpt-20.pt", "notes.txt",
                                               "ckpt-x.pt", "ckpt-25.pt", "ckpt-30.pt"}));
  EXPECT_TRUE(fs::exists(base + "/outside")) << "a symlink's target is never touched";
  EXPECT_EQ(sweeper.size(), 1u) << "a dir with files left is still watched";
  fs::remove_all(base);
}

TEST(MemoryDirSweeper, ADirLeftEmptyIsRemovedAndForgotten) {
  const std::string base = MakeBase();
  const std::string dir = base + "/job-2-100";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const absl::Time t0 = absl::Now();
  Write(dir + "/ckpt-5.pt", t0 - absl::Hours(1));
  MemoryDirSweeper sweeper(absl::Minutes(1));
  ASSERT_EQ(sweeper.Launched("job-2", dir, t0), Launch::kChanged);
  // A dir that never came to be (its task ended before writing) is forgotten.
  ASSERT_EQ(sweeper.Launched("job-3", base + "/job-3-100", t0), Launch::kChanged);
  EXPECT_EQ(sweeper.size(), 2u);
  const std::vector<std::string> removed = sweeper.Sweep(t0 + absl::Minutes(2), NeverBusy, Never);
  EXPECT_EQ(removed, (std::vector<std::string>{dir + "/ckpt-5.pt", dir}));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(sweeper.size(), 0u);
  fs::remove_all(base);
}

TEST(MemoryDirSweeper, LeavesAloneDirsOthersMayWriteToSymlinksAndBadPaths) {
  const std::string base = MakeBase();
  const absl::Time t0 = absl::Now();
  const std::string open = base + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  Write(open + "/ckpt-5.pt", t0 - absl::Hours(1));
  const std::string real = base + "/real";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  Write(real + "/ckpt-5.pt", t0 - absl::Hours(1));
  ASSERT_EQ(::symlink(real.c_str(), (base + "/link").c_str()), 0);

  MemoryDirSweeper sweeper(absl::Minutes(1));
  ASSERT_EQ(sweeper.Launched("job-1", open, t0), Launch::kChanged);
  ASSERT_EQ(sweeper.Launched("job-1", base + "/link", t0), Launch::kChanged);
  EXPECT_EQ(sweeper.Launched("job-1", "relative/dir", t0), Launch::kRefused);
  EXPECT_EQ(sweeper.Launched("job-1", "/shm", t0), Launch::kRefused) << "one component";
  EXPECT_EQ(sweeper.Launched("job-1", base + "/../etc", t0), Launch::kRefused);
  EXPECT_EQ(sweeper.Launched("job-1", base + "/./x", t0), Launch::kRefused);
  EXPECT_EQ(sweeper.Launched("job-1", "", t0), Launch::kRefused);
  EXPECT_TRUE(sweeper.Sweep(t0 + absl::Minutes(2), NeverBusy, Never).empty());
  EXPECT_TRUE(fs::exists(open + "/ckpt-5.pt"));
  EXPECT_TRUE(fs::exists(real + "/ckpt-5.pt"));
  EXPECT_EQ(sweeper.size(), 0u) << "both forgotten";
  fs::remove_all(base);
}

// No other user can redirect a sweep: a symlink anywhere on the path, a
// directory on the way that is another user's, or one others may write to
// that is not sticky, and the dir is left alone and forgotten; a sticky
// one (as /tmp, /dev/shm) is fine.
TEST(MemoryDirSweeper, LeavesAloneDirsBehindASymlinkOrADirectoryAnotherUserControls) {
  const std::string base = MakeBase();
  const absl::Time t0 = absl::Now(), old = t0 - absl::Hours(1);
  auto job_dir = [&](const std::string& parent, mode_t parent_mode) {
    EXPECT_EQ(::mkdir(parent.c_str(), 0700), 0) << parent;
    EXPECT_EQ(::chmod(parent.c_str(), parent_mode), 0) << parent;
    const std::string dir = parent + "/job-1-100";
    EXPECT_EQ(::mkdir(dir.c_str(), 0700), 0) << dir;
    Write(dir + "/ckpt-5.pt", old);
    return dir;
  };
  const std::string behind_link = job_dir(base + "/real", 0700);
  ASSERT_EQ(::symlink((base + "/real").c_str(), (base + "/link").c_str()), 0);
  const std::string open_parent = job_dir(base + "/open", 0777);
  const std::string sticky_parent = job_dir(base + "/sticky", 01777);
  std::string others_parent;
  if (::geteuid() == 0) {
    others_parent = job_dir(base + "/others", 0755);
    ASSERT_EQ(::chown((base + "/others").c_str(), 54321, 54321), 0);
  }

  MemoryDirSweeper sweeper(absl::Minutes(1));
  ASSERT_EQ(sweeper.Launched("job-1", base + "/link/job-1-100", t0), Launch::kChanged);
  ASSERT_EQ(sweeper.Launched("job-1", open_parent, t0), Launch::kChanged);
  ASSERT_EQ(sweeper.Launched("job-1", sticky_parent, t0), Launch::kChanged);
  if (!others_parent.empty()) {
    ASSERT_EQ(sweeper.Launched("job-1", others_parent, t0), Launch::kChanged);
  }
  const std::vector<std::string> removed = sweeper.Sweep(t0 + absl::Minutes(2), NeverBusy, Never);
  EXPECT_EQ(removed, (std::vector<std::string>{sticky_parent + "/ckpt-5.pt", sticky_parent}));
  EXPECT_TRUE(fs::exists(behind_link + "/ckpt-5.pt"));
  EXPECT_TRUE(fs::exists(open_parent + "/ckpt-5.pt"));
  if (!others_parent.empty()) EXPECT_TRUE(fs::exists(others_parent + "/ckpt-5.pt"));
  EXPECT_EQ(sweeper.size(), 0u) << "all forgotten";
  fs::remove_all(base);
}

TEST(MemoryDirSweeper, SaysWhenWhatItWatchesChanged) {
  MemoryDirSweeper sweeper(absl::Minutes(1));
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(sweeper.Launched("job-1", "/dev/shm/x/job-1-1", t0), Launch::kChanged);
  EXPECT_EQ(sweeper.Launched("job-1", "/dev/shm/x/job-1-1", t0), Launch::kUnchanged);
  EXPECT_EQ(sweeper.Launched("job-2", "/dev/shm/x/job-1-1", t0), Launch::kChanged);
  EXPECT_EQ(sweeper.Watched(),
            (std::vector<WatchedMemoryDir>{{"job-2", "/dev/shm/x/job-1-1"}}));
}

TEST(MemoryDirSweeper, WatchesABoundedNumberOfDirs) {
  MemoryDirSweeper sweeper(absl::Minutes(1));
  const absl::Time t0 = absl::Now();
  for (size_t i = 0; i < MemoryDirSweeper::kMaxDirs; ++i) {
    ASSERT_EQ(sweeper.Launched("job", absl::StrCat("/dev/shm/none-", i), t0), Launch::kChanged);
  }
  EXPECT_EQ(sweeper.Launched("job", "/dev/shm/none-0", t0), Launch::kUnchanged) << "one already watched";
  EXPECT_EQ(sweeper.Launched("job", "/dev/shm/one-more", t0), Launch::kRefused);
  EXPECT_EQ(sweeper.size(), MemoryDirSweeper::kMaxDirs);
}

}  // namespace
}  // namespace frameworm
