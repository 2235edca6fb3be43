// "Did you mean": the candidate closest to a misspelt name.
// Thread safety: a pure function.
#ifndef FRAMEWORM_COMMON_CLOSEST_MATCH_H_
#define FRAMEWORM_COMMON_CLOSEST_MATCH_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace frameworm {

// The candidate with the smallest edit distance to `got` (compared in lower
// case), if that distance is at most max(2, |got| / 3); else "".
std::string ClosestMatch(absl::string_view got,
                         const std::vector<std::string>& candidates);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_CLOSEST_MATCH_H_
