#include "coordinator/port_allocator.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {

PortAllocator::PortAllocator(const Options& options) : options_(options), next_(options.first) {
  if (next_ < options_.port_min || next_ > options_.port_max) {
    std::random_device rd;
    next_ = options_.port_min +
            static_cast<int>(rd() % static_cast<unsigned>(options_.port_max - options_.port_min + 1));
  }
}

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
