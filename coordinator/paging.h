// Paging of the list RPCs (ListJobs, ListWorkers, GetMetrics; ListEvents by
// its own cursor, TakeEventPage): one page of
// an ordered list, so no response outgrows the message limit however much
// the cluster holds. A page holds the items whose key is after the token
// (empty: from the first), at most `size` of them (0: the default) and at
// most `max_bytes` of encoded items (protobuf messages: ByteSizeLong; a page
// holds at least one item), so large items (a job's spec can be about
// 1 MiB) make shorter pages, not an oversized response; the next token is
// the last item's key, empty on the last page. Keys order as strings:
// numeric keys are written with NumericPageKey.
//
// Errors: INVALID_ARGUMENT for a size outside 0..max_size.
// Thread safety: free functions.
#ifndef FRAMEWORM_COORDINATOR_PAGING_H_
#define FRAMEWORM_COORDINATOR_PAGING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
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

// Under gRPC's default 4 MiB receive limit (a client with default
// settings, e.g. Python's grpcio, reads every page), with room for the
// response's other fields.
inline constexpr size_t kMaxPageBytes = 3 << 20;

template <typename T>
size_t EncodedBytes(const T& item) {
  if constexpr (requires { item.ByteSizeLong(); }) {
    return item.ByteSizeLong();
  } else {
    return sizeof(T);
  }
}

// `all` is in key order; `key(item)` gives an item's key.
template <typename T, typename KeyFn>
absl::StatusOr<Page<T>> TakePage(std::vector<T> all, int size, const std::string& token,
                                 int default_size, int max_size, KeyFn key,
                                 size_t max_bytes = kMaxPageBytes) {
  if (size < 0 || size > max_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be 0 (default ", default_size, ") to ", max_size,
                     ", got ", size));
  }
  if (size == 0) size = default_size;
  Page<T> page;
  size_t bytes = 0;
  for (T& item : all) {
    if (!token.empty() && !(key(item) > token)) continue;
    const size_t n = EncodedBytes(item);
    if (static_cast<int>(page.items.size()) == size ||
        (!page.items.empty() && n > max_bytes - std::min(bytes, max_bytes))) {
      page.next_token = key(page.items.back());
      break;
    }
    bytes += n;
    page.items.push_back(std::move(item));
  }
  return page;
}

// A page of ListEvents: of `events` (in seq order; Event has seq()), those
// `visible` keeps, within `max_bytes` encoded (at least one), and the seq to
// go on after: that of the last event looked at, a filtered one included,
// so the next call neither repeats nor skips one (`after` when none was).
template <typename Event, typename Visible>
std::pair<std::vector<Event>, int64_t> TakeEventPage(std::vector<Event> events, int64_t after,
                                                     Visible visible,
                                                     size_t max_bytes = kMaxPageBytes) {
  std::pair<std::vector<Event>, int64_t> page{{}, after};
  size_t bytes = 0;
  for (Event& e : events) {
    if (visible(e)) {
      const size_t n = EncodedBytes(e);
      if (!page.first.empty() && n > max_bytes - std::min(bytes, max_bytes)) break;
      bytes += n;
      page.second = e.seq();
      page.first.push_back(std::move(e));
    } else {
      page.second = e.seq();
    }
  }
  return page;
}

// A job's place in submission order ("job-000042": its sequence number).
inline std::string JobPageKey(const std::string& job_id) {
  int64_t seq = 0;
  const size_t dash = job_id.rfind('-');
  if (dash != std::string::npos) (void)absl::SimpleAtoi(job_id.substr(dash + 1), &seq);
  return NumericPageKey(seq);
}

// A page of jobs (`Job` has job_id()), in submission order: 500 by
// default, at most 1,000 (ListJobs and the dashboard's /api/jobs alike).
template <typename Job>
absl::StatusOr<Page<Job>> TakeJobPage(std::vector<Job> all, int size, const std::string& token) {
  return TakePage(std::move(all), size, token, 500, 1000,
                  [](const Job& j) { return JobPageKey(j.job_id()); });
}

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_PAGING_H_
