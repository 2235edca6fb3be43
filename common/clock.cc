#include "common/clock.h"

namespace frameworm {

RealClock& RealClock::Real() {
  static RealClock* clock = new RealClock();
  return *clock;
}

}  // namespace frameworm
