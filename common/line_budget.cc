#include "common/line_budget.h"

#include <algorithm>

namespace frameworm {

bool LineBudget::Take(absl::Time now, int64_t* suppressed) {
  if (last_ != absl::InfinitePast() && now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * per_second_);
  }
  if (now > last_ || last_ == absl::InfinitePast()) last_ = now;
  if (tokens_ < 1) {
    ++refused_;
    return false;
  }
  tokens_ -= 1;
  *suppressed = refused_;
  refused_ = 0;
  return true;
}

}  // namespace frameworm
