// A budget for log lines that a peer can cause (a refused message, a
// failed hold): a token bucket of `burst` lines refilled at `per_second`,
// so a flood of bad messages cannot fill the log or spend the CPU on
// writing it. The lines refused since the last one allowed are counted,
// for that one to say so.
//
// Thread safety: not thread-safe; one owner (a session's reactor, or the
// coordinator under its lock).
#ifndef FRAMEWORM_COMMON_LINE_BUDGET_H_
#define FRAMEWORM_COMMON_LINE_BUDGET_H_

#include <cstdint>

#include "absl/time/time.h"

namespace frameworm {

class LineBudget {
 public:
  LineBudget(double per_second, double burst)
      : per_second_(per_second), burst_(burst), tokens_(burst) {}
  // True when a line may be written at `now`; then `*suppressed` is how
  // many were refused since the last line allowed (0 usually).
  bool Take(absl::Time now, int64_t* suppressed);

 private:
  const double per_second_;
  const double burst_;
  double tokens_;
  absl::Time last_ = absl::InfinitePast();
  int64_t refused_ = 0;
};

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_LINE_BUDGET_H_
