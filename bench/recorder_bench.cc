// P10b micro-benchmark: what the flight recorder and the step timers cost
// per event on this machine. Prints one JSON line:
//   {"record_ns": ..., "clock_ns": ..., "take16_ns": ...}
// record_ns: one collective recorded (Enqueue, then Around a no-op wait:
// started and completed), median of 7 runs of 1,000,000; clock_ns: one
// steady_clock read (what the wait and data timers add per read);
// take16_ns: one snapshot of the newest 16 (once per ping, per second).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "train/flight_recorder.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double MedianNs(int n, F&& f) {
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) f(i);
    runs.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main() {
  frameworm::FlightRecorder rec(256);
  int64_t sink = 0;
  const double record = MedianNs(1000000, [&](int i) {
    const int64_t seq = rec.Enqueue("allreduce", "gradients", i & 3, 4096);
    rec.Around(seq, [&] { sink += seq; });
  });
  const double clock = MedianNs(1000000, [&](int) {
    sink += Clock::now().time_since_epoch().count() & 1;
  });
  const double take = MedianNs(100000, [&](int) { sink += rec.Take(16).enqueued & 1; });
  std::printf("{\"record_ns\": %.1f, \"clock_ns\": %.1f, \"take16_ns\": %.1f, \"sink\": %lld}\n",
              record, clock, take, static_cast<long long>(sink & 1));
  return 0;
}
