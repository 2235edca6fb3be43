#include "common/printable.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"

namespace frameworm {
namespace {

// The length of the well-formed UTF-8 sequence at text[i] (1 to 4), or 0
// when the bytes there are not one (a stray continuation byte, an overlong
// form, a surrogate, past U+10FFFF, or cut short).
size_t Utf8SequenceAt(absl::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const uint8_t c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlongs
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xbf) return 0;
  }
  return n;
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceAt(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ShownValue(absl::string_view value) {
  return PrintableLine(value, 80) + (value.size() > 80 ? "..." : "");
}

namespace {

// U+0080..U+009F (C1 controls; as UTF-8 0xC2 0x80..0x9F): some terminals
// act on them (0xC2 0x9B is CSI).
bool IsC1At(absl::string_view text, size_t i) {
  return i + 1 < text.size() && static_cast<uint8_t>(text[i]) == 0xC2 &&
         static_cast<uint8_t>(text[i + 1]) >= 0x80 && static_cast<uint8_t>(text[i + 1]) <= 0x9F;
}

}  // namespace

bool HasControlCharacter(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c < 0x20 || c == 0x7f || IsC1At(text, i)) return true;
  }
  return false;
}

bool IsPlainName(absl::string_view name) {
  return !name.empty() && name.size() <= 64 && name != "." && name != ".." &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                  c == '-';
         });
}

std::string PrintableLine(absl::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceAt(text, i);
    const auto c = static_cast<uint8_t>(text[i]);
    if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7f)) || (n == 2 && IsC1At(text, i))) {
      if (out.size() + 1 > max_bytes) break;
      out.push_back('?');
      i += n == 2 ? 2 : 1;  // a C1 control is one character
      continue;
    }
    if (out.size() + n > max_bytes) break;  // never half a character
    out.append(text.data() + i, n);
    i += n;
  }
  return out;
}

}  // namespace frameworm
