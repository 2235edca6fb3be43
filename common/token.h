// Secrets that prove who calls: random tokens and their constant-time
// comparison.
//
// Thread safety: free functions.
#ifndef FRAMEWORM_COMMON_TOKEN_H_
#define FRAMEWORM_COMMON_TOKEN_H_

#include <string>

#include "absl/strings/string_view.h"

namespace frameworm {

// 256 random bits from the kernel (getrandom), as 64 lowercase hex digits.
std::string NewToken();

// a == b, in time that depends only on the lengths (no early exit on the
// first differing byte).
bool TokensEqual(absl::string_view a, absl::string_view b);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_TOKEN_H_
