#include "common/collective_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm {

std::string CollectiveText(int64_t seq, absl::string_view op, absl::string_view what, int bucket,
                           int64_t bytes) {
  std::string out = absl::StrCat("#", seq, " ", op, " ", what);
  if (bucket >= 0) absl::StrAppend(&out, " bucket ", bucket);
  if (bytes >= 1 << 20) {
    absl::StrAppend(&out, absl::StrFormat(" (%.1f MiB)", bytes / 1048576.0));
  } else if (bytes >= 1024) {
    absl::StrAppend(&out, absl::StrFormat(" (%.1f KiB)", bytes / 1024.0));
  } else {
    absl::StrAppend(&out, " (", bytes, " B)");
  }
  return out;
}

}  // namespace frameworm
