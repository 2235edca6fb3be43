#include "train/json_values.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm {

std::string JsonNumber(double v, int digits) {
  return std::isfinite(v) ? absl::StrFormat("%.*g", digits, v) : "null";
}

std::string JsonValues(const std::string& prefix, const std::map<std::string, double>& values,
                       const std::vector<std::string>& order, int digits) {
  std::string out;
  for (const std::string& name : order) {
    auto it = values.find(name);
    if (it != values.end()) {
      absl::StrAppend(&out, ",\"", prefix, name, "\":", JsonNumber(it->second, digits));
    }
  }
  return out;
}

}  // namespace frameworm
