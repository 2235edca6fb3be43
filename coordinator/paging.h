// Paging of the list RPCs (ListJobs, ListWorkers, GetMetrics): one page of
// an ordered list, so no response outgrows the message limit however much
// the cluster holds. A page holds the items whose key is after the token
// (empty: from the first), at most `size` of them (0: the default); the
// next token is the last item's key, empty on the last page. Keys order
// as strings: numeric keys are written with NumericPageKey.
//
// Errors: INVALID_ARGUMENT for a size outside 0..max_size.
// Thread safety: free functions.
#ifndef FRAMEWORM_COORDINATOR_PAGING_H_
#define FRAMEWORM_COORDINATOR_PAGING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm::coordinator {

// A number as a key that sorts as the number does (20 digits, zero-padded).
inline std::string NumericPageKey(int64_t n) {
  return absl::StrFormat("%020d", n < 0 ? 0 : n);
}

template <typename T>
struct Page {
  std::vector<T> items;
  std::string next_token;
};

// `all` is in key order; `key(item)` gives an item's key.
template <typename T, typename KeyFn>
absl::StatusOr<Page<T>> TakePage(std::vector<T> all, int size, const std::string& token,
                                 int default_size, int max_size, KeyFn key) {
  if (size < 0 || size > max_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be 0 (default ", default_size, ") to ", max_size,
                     ", got ", size));
  }
  if (size == 0) size = default_size;
  Page<T> page;
  for (T& item : all) {
    if (!token.empty() && !(key(item) > token)) continue;
    if (static_cast<int>(page.items.size()) == size) {
      page.next_token = key(page.items.back());
      break;
    }
    page.items.push_back(std::move(item));
  }
  return page;
}

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_PAGING_H_
