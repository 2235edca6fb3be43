#include "common/printable.h"

namespace frameworm {

std::string PrintableLine(absl::string_view text, size_t max_bytes) {
  std::string out(text.substr(0, max_bytes));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

}  // namespace frameworm
