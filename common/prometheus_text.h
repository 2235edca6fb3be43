// Prometheus text exposition format (version 0.0.4), written by hand: one
// "# HELP" and "# TYPE" per metric family, then its samples, label values
// escaped (backslash, double quote, newline) and numbers printed so that
// Prometheus reads them back exactly (NaN and +Inf as it spells them).
//
// Thread safety: a writer is used by one thread.
#ifndef FRAMEWORM_COMMON_PROMETHEUS_TEXT_H_
#define FRAMEWORM_COMMON_PROMETHEUS_TEXT_H_

#include <string>
#include <utility>
#include <vector>

namespace frameworm {

using PromLabels = std::vector<std::pair<std::string, std::string>>;

class PromWriter {
 public:
  // Starts a family: `type` is gauge, counter or histogram. A family
  // already started is not repeated (its samples are appended).
  void Family(const std::string& name, const std::string& type, const std::string& help);
  // One sample line: name{labels} value.
  void Sample(const std::string& name, const PromLabels& labels, double value);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::vector<std::string> families_;
};

// The label value escaped for the exposition format (without quotes).
std::string PromEscape(const std::string& value);
// A number as the exposition format writes it: integers without a
// fraction, NaN, +Inf, -Inf, else the shortest exact decimal.
std::string PromNumber(double v);

// Content-Type of the format.
inline constexpr char kPromContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_PROMETHEUS_TEXT_H_
