#include "common/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace frameworm {

absl::Status EnsurePrivateDirectory(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot stat ", dir, ": ", std::strerror(errno)));
    }
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
    }
    if (::lstat(dir.c_str(), &st) != 0) {
      return absl::InternalError(absl::StrCat("cannot stat ", dir, ": ", std::strerror(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is not a directory (or is a symbolic link)"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " belongs to uid ", st.st_uid, ", not to this user (uid ", ::geteuid(), ")"));
  }
  if ((st.st_mode & 022) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is writable by other users (mode ", st.st_mode & 0777, ")"));
  }
  return absl::OkStatus();
}

}  // namespace frameworm
