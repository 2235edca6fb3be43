#include "coordinator/port_allocator.h"

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {

absl::StatusOr<int> PortAllocator::Acquire() {
  const int n = options_.port_max - options_.port_min + 1;
  for (int i = 0; i < n; ++i) {
    const int p = next_;
    next_ = p >= options_.port_max ? options_.port_min : p + 1;
    if (in_use_.insert(p).second) return p;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("every MASTER_PORT in ", options_.port_min, "-",
                   options_.port_max, " is in use"));
}

}  // namespace frameworm::coordinator
