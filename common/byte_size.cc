#include "common/byte_size.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm {

std::string ByteSize(int64_t bytes) {
  if (bytes >= 1 << 20) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  if (bytes >= 1024) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrCat(bytes, " B");
}

}  // namespace frameworm
