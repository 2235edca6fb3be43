#include "common/collective_text.h"

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace frameworm {

std::string CollectiveText(int64_t seq, absl::string_view op, absl::string_view what, int bucket,
                           int64_t bytes) {
  std::string out = absl::StrCat("#", seq, " ", op, " ", what);
  if (bucket >= 0) absl::StrAppend(&out, " bucket ", bucket);
  absl::StrAppend(&out, " (", ByteSize(bytes), ")");
  return out;
}

}  // namespace frameworm
