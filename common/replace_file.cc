#include "common/replace_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace frameworm {

absl::Status ReplaceFile(const std::string& path, const std::string& contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << contents;
    out.flush();
    if (!out) {
      const std::string why = std::strerror(errno);
      std::filesystem::remove(tmp, ec);
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", why));
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace frameworm
