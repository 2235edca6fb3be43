// The collective flight recorder on an injected clock: numbering, states,
// the ring's wrap-around, snapshots and the text dump.
#include "train/flight_recorder.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace frameworm {
namespace {

struct FakeNs {
  int64_t t = 1'000'000'000;
  FlightRecorder::NowNs fn() {
    return [this] { return t; };
  }
};

TEST(FlightRecorderTest, NumbersCollectivesAndFollowsTheirStates) {
  FakeNs clock;
  FlightRecorder r(8, clock.fn());
  const int64_t a = r.Enqueue("allreduce", "gradients", 0, 4 << 20);
  const int64_t b = r.Enqueue("allreduce", "gradients", 1, 2048);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  clock.t += 1'000'000;  // 1 ms
  r.Started(a);
  clock.t += 3'000'000;
  r.Completed(a);
  r.Started(b);
  FlightRecorder::Snapshot s = r.Take(8);
  EXPECT_EQ(s.enqueued, 2);
  EXPECT_EQ(s.completed, 1);
  ASSERT_EQ(s.recent.size(), 2u);
  EXPECT_EQ(s.recent[0].state, CollectiveState::kCompleted);
  EXPECT_EQ(s.recent[0].ended_ns - s.recent[0].enqueued_ns, 4'000'000);
  EXPECT_EQ(s.recent[0].started_ns - s.recent[0].enqueued_ns, 1'000'000);
  EXPECT_EQ(s.recent[1].state, CollectiveState::kStarted);
  EXPECT_EQ(DescribeCollective(s.recent[0]), "#1 allreduce gradients bucket 0 (4.0 MiB)");
  EXPECT_EQ(DescribeCollective(s.recent[1]), "#2 allreduce gradients bucket 1 (2.0 KiB)");
  clock.t += 2'000'000'000;
  const std::string dump = r.Dump();
  EXPECT_NE(dump.find("#1 allreduce gradients bucket 0 (4.0 MiB) completed (enqueued 2.004 s ago, "
                      "took 0.004 s)\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("#2 allreduce gradients bucket 1 (2.0 KiB) started (enqueued 2.004 s ago, "
                      "waited 2.000 s so far)\n"),
            std::string::npos)
      << dump;
  r.Failed(b);
  EXPECT_EQ(r.Take(1).recent[0].state, CollectiveState::kFailed);
  EXPECT_EQ(r.Take(1).completed, 1);  // a failed one does not count as completed
}

TEST(FlightRecorderTest, TheRingKeepsTheNewestAndIgnoresOverwrittenNumbers) {
  FakeNs clock;
  FlightRecorder r(4, clock.fn());
  for (int i = 0; i < 10; ++i) {
    const int64_t s = r.Enqueue("broadcast", "step action", -1, 16);
    r.Completed(s);
  }
  FlightRecorder::Snapshot s = r.Take(100);
  EXPECT_EQ(s.enqueued, 10);
  EXPECT_EQ(s.completed, 10);
  ASSERT_EQ(s.recent.size(), 4u);
  EXPECT_EQ(s.recent.front().seq, 7);
  EXPECT_EQ(s.recent.back().seq, 10);
  EXPECT_EQ(DescribeCollective(s.recent.back()), "#10 broadcast step action (16 B)");
  r.Started(3);  // long overwritten: ignored, #7 (same slot) untouched
  r.Failed(3);
  EXPECT_EQ(r.Take(4).recent.front().state, CollectiveState::kCompleted);
  EXPECT_EQ(r.Take(2).recent.front().seq, 9);
  r.Started(0);
  r.Started(99);  // never issued
  EXPECT_EQ(r.Take(4).enqueued, 10);
}

TEST(FlightRecorderTest, CapacityZeroRecordsNothing) {
  FlightRecorder r(0);
  EXPECT_EQ(r.Enqueue("allreduce", "gradients", 0, 8), 0);
  r.Started(0);
  r.Completed(0);
  FlightRecorder::Snapshot s = r.Take(16);
  EXPECT_EQ(s.enqueued, 0);
  EXPECT_TRUE(s.recent.empty());
  EXPECT_EQ(r.Dump(), "");
}

// Autograd threads enqueue while the pinger reads: numbers stay unique and
// dense, and every snapshot is consistent.
TEST(FlightRecorderTest, ConcurrentWritersAndAReader) {
  FlightRecorder r(64);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      FlightRecorder::Snapshot s = r.Take(16);
      EXPECT_LE(s.completed, s.enqueued);
      for (size_t i = 1; i < s.recent.size(); ++i) EXPECT_EQ(s.recent[i].seq, s.recent[i - 1].seq + 1);
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&r] {
      for (int i = 0; i < 2000; ++i) r.Completed(r.Enqueue("allreduce", "gradients", i % 3, 64));
    });
  }
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(r.Take(0).enqueued, 8000);
  EXPECT_EQ(r.Take(0).completed, 8000);
}

}  // namespace
}  // namespace frameworm
