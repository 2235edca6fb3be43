// Text from elsewhere (a process's stderr, a peer's message) made safe to
// put in a status line or a log: bounded, one line, no control characters.
//
// Thread safety: a free function.
#ifndef FRAMEWORM_COMMON_PRINTABLE_H_
#define FRAMEWORM_COMMON_PRINTABLE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace frameworm {

// The first `max_bytes` bytes of `text`, every control character (newlines
// included) and DEL replaced by '?'.
std::string PrintableLine(absl::string_view text, size_t max_bytes);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_PRINTABLE_H_
