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

// At most the first `max_bytes` bytes of `text` as valid UTF-8 (proto3
// strings must be: a peer drops a message that is not): every control
// character (newlines included), DEL, each C1 control (U+0080..U+009F) and
// every byte that is not part of a well-formed UTF-8 sequence replaced by
// '?', and a character that would straddle `max_bytes` left out whole.
std::string PrintableLine(absl::string_view text, size_t max_bytes);

// A value quoted in an error message (values may be 256 KiB): its first 80
// bytes as PrintableLine makes them, then "..." when it was cut.
std::string ShownValue(absl::string_view value);

// Whether `text` is well-formed UTF-8 (proto3's rule for strings): no stray
// continuation byte, overlong form, surrogate, nothing past U+10FFFF or cut
// short.
bool IsValidUtf8(absl::string_view text);

// Whether `text` holds a control character (below 0x20, newlines and tabs
// included), DEL or a C1 control (U+0080..U+009F, as UTF-8): names that
// reach terminals must not.
bool HasControlCharacter(absl::string_view text);

// Whether `name` is 1 to 64 characters of A-Z a-z 0-9 . _ -, and not "."
// or "..": safe as one path component and on any terminal (job ids, worker
// names).
bool IsPlainName(absl::string_view name);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_PRINTABLE_H_
