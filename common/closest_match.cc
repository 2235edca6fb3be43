#include "common/closest_match.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace frameworm {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string ClosestMatch(absl::string_view got,
                         const std::vector<std::string>& candidates) {
  const std::string lower = absl::AsciiStrToLower(got);
  std::string best;
  size_t best_d = 0;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(lower, c);
    if (best.empty() || d < best_d) {
      best = c;
      best_d = d;
    }
  }
  const size_t limit = std::max<size_t>(2, got.size() / 3);
  return !best.empty() && best_d <= limit ? best : "";
}

}  // namespace frameworm
