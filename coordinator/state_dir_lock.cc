#include "coordinator/state_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace frameworm::coordinator {

absl::StatusOr<std::unique_ptr<StateDirLock>> StateDirLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/coordinator.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(absl::StripAsciiWhitespace(std::string(buf, n))) : "?";
    return absl::FailedPreconditionError(absl::StrCat(
        "state dir ", dir, " is in use by another frameworm-coordinator (pid ", holder,
        "); stop it or use another --state-dir"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; only the next one's message suffers.
  }
  return std::unique_ptr<StateDirLock>(new StateDirLock(fd));
}

StateDirLock::~StateDirLock() { ::close(fd_); }

}  // namespace frameworm::coordinator
