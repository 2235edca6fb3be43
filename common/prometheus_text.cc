#include "common/prometheus_text.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm {

std::string PromEscape(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PromNumber(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

void PromWriter::Family(const std::string& name, const std::string& type,
                        const std::string& help) {
  if (std::find(families_.begin(), families_.end(), name) != families_.end()) return;
  families_.push_back(name);
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void PromWriter::Sample(const std::string& name, const PromLabels& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&text_, i ? "," : "", labels[i].first, "=\"", PromEscape(labels[i].second),
                      "\"");
    }
    text_ += "}";
  }
  absl::StrAppend(&text_, " ", PromNumber(value), "\n");
}

}  // namespace frameworm
