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

enum class Opened { kOpen, kGone, kRefused, kRetry };

// Opens `dir` (absolute, checked by UsableDir) component by component from
// "/", never following a symlink (O_NOFOLLOW on each): every directory on
// the way must be root's or this user's, and writable by no one else
// unless sticky (as /tmp and /dev/shm are), so no other user can swap an
// entry on the path; `dir` itself must be this user's alone. On kOpen,
// *fd is `dir` and *parent its parent (both to be closed by the caller).
Opened OpenOwnDir(const std::string& dir, int* fd, int* parent) {
  const uid_t me = ::geteuid();
  auto refused = [&](const struct stat& st, bool last) {
    if (last) return st.st_uid != me || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    return (st.st_uid != 0 && st.st_uid != me) ||
           ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0);
  };
  auto failed = [](int e) {
    return e == ENOENT || e == ELOOP || e == ENOTDIR ? Opened::kGone : Opened::kRetry;
  };
  int at = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return Opened::kRetry;
  const std::vector<std::string> parts = absl::StrSplit(dir.substr(1), '/', absl::SkipEmpty());
  int up = -1;
  for (size_t i = 0; i < parts.size(); ++i) {
    struct stat st;
    if (::fstat(at, &st) != 0) {
      const Opened o = failed(errno);
      ::close(at);
      if (up >= 0) ::close(up);
      return o;
    }
    if (refused(st, false)) {
      ::close(at);
      if (up >= 0) ::close(up);
      return Opened::kRefused;
    }
    const int next =
        ::openat(at, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int e = errno;
    if (up >= 0) ::close(up);
    up = at;
    at = next;
    if (at < 0) {
      ::close(up);
      return failed(e);
    }
  }
  struct stat st;
  if (::fstat(at, &st) != 0 || refused(st, true)) {
    ::close(at);
    ::close(up);
    return Opened::kRefused;
  }
  *fd = at;
  *parent = up;
  return Opened::kOpen;
}

}  // namespace

MemoryDirSweeper::Launch MemoryDirSweeper::Launched(const std::string& job_id,
                                                    const std::string& dir, absl::Time now) {
  if (!UsableDir(dir)) return Launch::kRefused;
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) {
    if (dirs_.size() >= kMaxDirs) return Launch::kRefused;
    dirs_.emplace(dir, Dir{job_id, now});
    return Launch::kChanged;
  }
  it->second.quiet_since = now;
  if (it->second.job_id == job_id) return Launch::kUnchanged;
  it->second.job_id = job_id;
  return Launch::kChanged;
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
    int fd = -1, parent = -1;
    const Opened opened = OpenOwnDir(dir, &fd, &parent);
    if (opened == Opened::kRetry) {
      ++it;  // out of descriptors or memory for now: tried again next time
      continue;
    }
    if (opened != Opened::kOpen) {
      // Gone, a symlink on the way, or a directory on the way that another
      // user may change: nothing to sweep.
      it = dirs_.erase(it);
      continue;
    }
    const bool empty = SweepOpenDir(fd, dir, now, quiet_, held, &removed);
    ::close(fd);
    const std::string leaf = dir.substr(dir.find_last_of('/') + 1);
    const bool gone = empty && ::unlinkat(parent, leaf.c_str(), AT_REMOVEDIR) == 0;
    ::close(parent);
    if (gone) {
      removed.push_back(dir);
      it = dirs_.erase(it);
      continue;
    }
    ++it;
  }
  return removed;
}

}  // namespace frameworm
