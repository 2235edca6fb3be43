#include "common/log_cap.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace frameworm {

int64_t FirstKept(int fd, int64_t offset) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return offset;
  if (offset >= st.st_size) return offset;  // nothing there (yet): nothing dropped
  const off_t data = ::lseek(fd, offset, SEEK_DATA);
  if (data < 0) return errno == ENXIO ? st.st_size : offset;
  return data;
}

absl::StatusOr<int64_t> CapLog(const std::string& path, int64_t max_bytes,
                               int64_t keep_from) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t size = st.st_size;
  int64_t first = FirstKept(fd, 0);
  if (max_bytes > 0 && size - first > max_bytes) {
    const int64_t end =
        std::min(size - max_bytes / 2, keep_from) / kLogCapBlock * kLogCapBlock;
    if (end > first) {
      if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, end) != 0) {
        const int e = errno;
        ::close(fd);
        if (e == EOPNOTSUPP || e == ENOSYS)
          return absl::UnimplementedError(
              absl::StrCat("cannot cap ", path, ": the filesystem does not punch holes"));
        return absl::InternalError(absl::StrCat("cannot cap ", path, ": ", std::strerror(e)));
      }
      first = FirstKept(fd, 0);
    }
  }
  ::close(fd);
  return first;
}

}  // namespace frameworm
