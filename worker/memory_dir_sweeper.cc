#include "worker/memory_dir_sweeper.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>

#include "absl/strings/str_split.h"

namespace frameworm {
namespace {

bool UsableDir(const std::string& dir) {
  if (dir.size() < 2 || dir.size() > 4096 || dir[0] != '/' ||
      dir.find('\0') != std::string::npos) {
    return false;
  }
  int parts = 0;
  for (absl::string_view part : absl::StrSplit(dir.substr(1), '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") return false;
    ++parts;
  }
  return parts >= 2;
}

// "ckpt-<digits>.pt", or that followed by "." and anything (a writer's
// temporary file).
bool CheckpointName(const std::string& name) {
  if (name.rfind("ckpt-", 0) != 0) return false;
  size_t i = 5;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 5 || name.compare(i, 3, ".pt") != 0) return false;
  return i + 3 == name.size() || name[i + 3] == '.';
}

// Sweeps the open directory `fd` (at `dir`); true when it is left empty.
bool SweepOpenDir(int fd, const std::string& dir, absl::Time now, absl::Duration quiet,
                  const std::function<bool(const std::string&)>& held,
                  std::vector<std::string>* removed) {
  const int listing = ::dup(fd);
  if (listing < 0) return false;
  DIR* d = ::fdopendir(listing);
  if (d == nullptr) {
    ::close(listing);
    return false;
  }
  bool empty = true;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    const bool gone = CheckpointName(name) &&
                      ::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISREG(st.st_mode) && now - absl::TimeFromTimespec(st.st_mtim) >= quiet &&
                      !held(path) && ::unlinkat(fd, name.c_str(), 0) == 0;
    if (gone) {
      removed->push_back(path);
    } else {
      empty = false;
    }
  }
  ::closedir(d);
  return empty;
}

}  // namespace

bool MemoryDirSweeper::Launched(const std::string& job_id, const std::string& dir,
                                absl::Time now) {
  if (!UsableDir(dir)) return false;
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) {
    if (dirs_.size() >= kMaxDirs) return false;
    it = dirs_.emplace(dir, Dir{job_id, now}).first;
  }
  it->second.job_id = job_id;
  it->second.quiet_since = now;
  return true;
}

std::vector<WatchedMemoryDir> MemoryDirSweeper::Watched() const {
  std::vector<WatchedMemoryDir> out;
  out.reserve(dirs_.size());
  for (const auto& [dir, d] : dirs_) out.push_back({d.job_id, dir});
  return out;
}

std::vector<std::string> MemoryDirSweeper::Sweep(
    absl::Time now, const std::function<bool(const std::string&, const std::string&)>& busy,
    const std::function<bool(const std::string&)>& held) {
  std::vector<std::string> removed;
  for (auto it = dirs_.begin(); it != dirs_.end();) {
    const std::string& dir = it->first;
    Dir& d = it->second;
    if (busy(d.job_id, dir)) d.quiet_since = now;
    if (now - d.quiet_since < quiet_) {
      ++it;
      continue;
    }
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT && errno != ELOOP && errno != ENOTDIR) {
      ++it;  // out of descriptors or memory for now: tried again next time
      continue;
    }
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      // Gone, a symlink, or not this user's alone: nothing to sweep.
      if (fd >= 0) ::close(fd);
      it = dirs_.erase(it);
      continue;
    }
    const bool empty = SweepOpenDir(fd, dir, now, quiet_, held, &removed);
    ::close(fd);
    if (empty && ::rmdir(dir.c_str()) == 0) {
      removed.push_back(dir);
      it = dirs_.erase(it);
      continue;
    }
    ++it;
  }
  return removed;
}

}  // namespace frameworm
