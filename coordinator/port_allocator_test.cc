#include "coordinator/port_allocator.h"

#include <set>

#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

TEST(PortAllocatorTest, HandsOutEveryPortOnceThenRunsOut) {
  PortAllocator ports({29500, 29502});
  std::set<int> got;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int> p = ports.Acquire();
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GE(*p, 29500);
    EXPECT_LE(*p, 29502);
    got.insert(*p);
  }
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(ports.in_use(), 3);
  absl::StatusOr<int> none = ports.Acquire();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("29500-29502"), std::string::npos);
  ports.Release(29501);
  EXPECT_EQ(*ports.Acquire(), 29501);
}

TEST(PortAllocatorTest, RoundRobinDoesNotReuseAReleasedPortAtOnce) {
  PortAllocator ports({29500, 29509, 29500});
  const int first = *ports.Acquire();
  ports.Release(first);
  const int second = *ports.Acquire();
  EXPECT_NE(second, first);
  EXPECT_EQ(second, first + 1);
  ports.Release(first + 5);  // not in use: nothing happens
  EXPECT_EQ(ports.in_use(), 1);
}

TEST(PortAllocatorTest, ARestartedAllocatorStartsAtARandomPort) {
  // 20 allocators over 1000 ports: all starting at the same port would be
  // a 1 in 10^57 chance.
  std::set<int> firsts;
  for (int i = 0; i < 20; ++i) firsts.insert(*PortAllocator({29000, 29999}).Acquire());
  EXPECT_GT(firsts.size(), 1u);
  EXPECT_EQ(*PortAllocator({29000, 29999, 29123}).Acquire(), 29123);
}

TEST(PortAllocatorTest, ReservedPortsAreSkipped) {
  PortAllocator ports({29500, 29503, 29500});
  ports.Reserve(29500);
  ports.Reserve(29501);
  EXPECT_EQ(*ports.Acquire(), 29502);
  EXPECT_EQ(*ports.Acquire(), 29503);
  EXPECT_FALSE(ports.Acquire().ok());
  ports.Release(29500);
  EXPECT_EQ(*ports.Acquire(), 29500);
}

}  // namespace
}  // namespace frameworm::coordinator
