// ShmAllreduce across real processes (launch_distributed re-executes this
// binary with a --gtest_filter for the current test; ranks rendezvous
// through a c10d::FileStore in a temporary directory).
#include "train/shm_allreduce.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "train/launch.h"
#include "train/test_util.h"

namespace frameworm {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> SelfArgs() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return {"/proc/self/exe",
          std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name()};
}

std::string OutDir(const std::string& name) {
  if (IsLaunchedChild()) return std::getenv("FRAMEWORM_TEST_OUT");
  std::string dir = testutil::MakeTempDir(name);
  ::setenv("FRAMEWORM_TEST_OUT", dir.c_str(), 1);
  return dir;
}

absl::Status LaunchRanks(int nprocs, const std::function<int(int, int)>& fn) {
  LaunchOptions lo;
  lo.nprocs = nprocs;
  lo.argv = SelfArgs();
  return launch_distributed(fn, lo);
}

ShmAllreduceOptions Opts(int rank, int world, int64_t capacity, milliseconds timeout) {
  ShmAllreduceOptions o;
  o.name = "test";
  o.rank = rank;
  o.world_size = world;
  o.capacity_bytes = capacity;
  o.timeout = timeout;
  return o;
}

float Value(int rank, int64_t i, int rep) {
  return 0.25f * static_cast<float>((i * 7 + rank * 13 + rep) % 101) - 3.0f + 0.001f * rank;
}

// Sizes below, at and above the capacity (1024 floats), odd ones included.
// Runs fn(dir, rank, world) in `world` processes (LaunchRanks) over a fresh
// output directory named `name`, removed afterwards; LaunchRanks' status.
absl::Status RunRanks(const std::string& name, int world,
                      int (*fn)(const std::string& dir, int rank, int world)) {
  const std::string dir = OutDir(name);
  absl::Status s = LaunchRanks(world, [dir, fn](int r, int w) { return fn(dir, r, w); });
  testutil::RemoveTree(dir);
  return s;
}

int SumsRank(const std::string& dir, int rank, int world) {
  c10d::FileStore store(dir + "/store", world);
  ShmAllreduceOptions o = Opts(rank, world, 4096, milliseconds(30000));
  o.shared_bytes = (100003 + 7) * 4;  // the largest n below, at offset 7
  auto s = ShmAllreduce::Create(o, store);
  if (!s.ok()) {
    std::cerr << s.status() << std::endl;
    return 20;
  }
  // The name is gone from /dev/shm once setup returned.
  const int fd = ::shm_open((*s)->segment_name().c_str(), O_RDWR, 0600);
  if (fd >= 0 || errno != ENOENT) {
    std::cerr << "segment " << (*s)->segment_name() << " still linked" << std::endl;
    return 21;
  }
  for (int rep = 0; rep < 3; ++rep) {
    for (int64_t n : {0L, 1L, 17L, 1000L, 1024L, 1025L, 4099L, 100003L}) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = Value(rank, i, rep);
      absl::Status st = (*s)->Allreduce(v.data(), n);
      if (!st.ok()) {
        std::cerr << st << std::endl;
        return 22;
      }
      for (int64_t i = 0; i < n; ++i) {
        float want = Value(0, i, rep);  // rank order, as the contract says
        for (int r = 1; r < world; ++r) want += Value(r, i, rep);
        if (v[i] != want) {
          std::cerr << "rank " << rank << " n=" << n << " i=" << i << ": " << v[i]
                    << " != " << want << std::endl;
          return 23;
        }
      }
      // The mean: the same sum divided by the world size, in float, as
      // the gradient path (which then skips its own division) asks for.
      for (int64_t i = 0; i < n; ++i) v[i] = Value(rank, i, rep);
      st = (*s)->Allreduce(v.data(), n, static_cast<float>(world));
      if (!st.ok()) {
        std::cerr << st << std::endl;
        return 24;
      }
      for (int64_t i = 0; i < n; ++i) {
        float sum = Value(0, i, rep);
        for (int r = 1; r < world; ++r) sum += Value(r, i, rep);
        const float want = sum / static_cast<float>(world);
        if (v[i] != want) {
          std::cerr << "mean: rank " << rank << " n=" << n << " i=" << i << ": " << v[i]
                    << " != " << want << std::endl;
          return 25;
        }
      }
      // In place in the shared region (at an odd offset): the same mean,
      // bit for bit, and the floats around the range untouched.
      float* region = (*s)->shared_buffer();
      if (region == nullptr || (*s)->shared_floats() < n + 8) return 26;
      region[6] = 42.0f;
      region[7 + n] = 43.0f;
      for (int64_t i = 0; i < n; ++i) region[7 + i] = Value(rank, i, rep);
      st = (*s)->AllreduceShared(7, n, static_cast<float>(world));
      if (!st.ok()) {
        std::cerr << st << std::endl;
        return 27;
      }
      for (int64_t i = 0; i < n; ++i) {
        if (region[7 + i] != v[i]) {
          std::cerr << "in place: rank " << rank << " n=" << n << " i=" << i << ": "
                    << region[7 + i] << " != " << v[i] << std::endl;
          return 28;
        }
      }
      if (region[6] != 42.0f || region[7 + n] != 43.0f) return 29;
      // The same with part of this rank's own share left outside the
      // region (two pieces, a gap between them): what the region holds
      // there (NaN) is never read, and the mean is the same bit for bit.
      const auto [lo, hi] = (*s)->SharedShare(n);
      std::vector<float> mine(n);
      for (int64_t i = 0; i < n; ++i) region[7 + i] = mine[i] = Value(rank, i, rep);
      std::vector<ShmAllreduce::OwnAddend> pieces;
      if (hi - lo >= 4) {
        const int64_t mid = lo + (hi - lo) / 2;
        pieces.push_back({lo, mid - lo - 1, mine.data() + lo});
        pieces.push_back({mid, hi - mid, mine.data() + mid});
        for (const auto& p : pieces) {
          for (int64_t i = p.begin; i < p.begin + p.len; ++i) region[7 + i] = std::nanf("");
        }
      }
      st = (*s)->AllreduceShared(7, n, static_cast<float>(world), pieces);
      if (!st.ok()) {
        std::cerr << st << std::endl;
        return 30;
      }
      for (int64_t i = 0; i < n; ++i) {
        if (region[7 + i] != v[i]) {
          std::cerr << "own addends: rank " << rank << " n=" << n << " i=" << i << ": "
                    << region[7 + i] << " != " << v[i] << std::endl;
          return 31;
        }
      }
    }
  }
  return 0;
}

// Broadcast: every rank gets the root's values, call after call with no
// pause between them (three ranks on this machine's cores, so a rank is
// often preempted between the barrier and its read), roots changing, and
// allreduces in between. Bad arguments are errors that leave it usable.
int BroadcastsRank(const std::string& dir, int rank, int world) {
  c10d::FileStore store(dir + "/store", world);
  auto s = ShmAllreduce::Create(Opts(rank, world, 4096, milliseconds(30000)), store);
  if (!s.ok()) {
    std::cerr << s.status() << std::endl;
    return 20;
  }
  auto want = [](int64_t call, int k, int root) { return call * 1000 + k * 10 + root; };
  for (int64_t call = 0; call < 3000; ++call) {
    const int root = static_cast<int>(call % world);
    const int n = 1 + static_cast<int>(call % ShmAllreduce::kMaxBroadcastValues);
    int64_t v[ShmAllreduce::kMaxBroadcastValues];
    for (int k = 0; k < n; ++k) v[k] = rank == root ? want(call, k, root) : -1;
    if (absl::Status st = (*s)->Broadcast(v, n, root); !st.ok()) {
      std::cerr << st << std::endl;
      return 21;
    }
    for (int k = 0; k < n; ++k) {
      if (v[k] != want(call, k, root)) {
        std::cerr << "rank " << rank << " call " << call << " value " << k << ": " << v[k]
                  << " != " << want(call, k, root) << std::endl;
        return 22;
      }
    }
    if (call % 7 == 0) {
      std::vector<float> f(17, static_cast<float>(rank));
      if (!(*s)->Allreduce(f.data(), 17).ok()) return 23;
      if (f[16] != static_cast<float>(world * (world - 1) / 2)) return 24;
    }
  }
  int64_t nine[9] = {0};
  if ((*s)->Broadcast(nine, 9).code() != absl::StatusCode::kInvalidArgument) return 25;
  if ((*s)->Broadcast(nine, 1, world).code() != absl::StatusCode::kInvalidArgument) return 26;
  if ((*s)->Broadcast(nullptr, 1).code() != absl::StatusCode::kInvalidArgument) return 27;
  nine[0] = rank == 0 ? 77 : 0;
  if (!(*s)->Broadcast(nine, 1).ok() || nine[0] != 77) return 28;
  return 0;
}

TEST(ShmAllreduceTest, BroadcastsEveryCallsValuesToEveryRank) {
  absl::Status s = RunRanks("shmb", 3, BroadcastsRank);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ShmAllreduceTest, SumsTwoRanks) {
  absl::Status s = RunRanks("shm2", 2, SumsRank);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ShmAllreduceTest, SumsThreeRanks) {
  absl::Status s = RunRanks("shm3", 3, SumsRank);
  EXPECT_TRUE(s.ok()) << s;
}

// Any divisor gives the quotient (a + b) / d bit for bit, through the slots
// and in the region: powers of two (taken as a product with the exact
// reciprocal), others (a quotient). The addends have arbitrary mantissas and
// span subnormal to huge magnitudes, so a reciprocal that is not exact, or
// rounding that differs from the quotient's, would show.
float Awkward(int rank, int64_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(rank) * 40503u + 12345u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  const float mant = 1.0f + static_cast<float>(x & 0x7fffff) / 8388608.0f;
  const int exp = static_cast<int>((x >> 23) % 300) - 150;  // 2^-150 .. 2^149: subnormals to huge
  const float v = std::ldexp(mant, std::min(exp, 126));
  return (x >> 31) != 0 ? -v : v;
}

int DivisorsRank(const std::string& dir, int rank, int world) {
  c10d::FileStore store(dir + "/store", world);
  ShmAllreduceOptions o = Opts(rank, world, 4096, milliseconds(30000));
  const int64_t n = 5003;
  o.shared_bytes = n * 4;
  auto s = ShmAllreduce::Create(o, store);
  if (!s.ok()) {
    std::cerr << s.status() << std::endl;
    return 40;
  }
  for (float d : {2.0f, 4.0f, 0.5f, 1024.0f, 3.0f, 6.0f, 0.1f, -2.0f}) {
    std::vector<float> v(n);
    float* region = (*s)->shared_buffer();
    for (int64_t i = 0; i < n; ++i) v[i] = region[i] = Awkward(rank, i);
    absl::Status st = (*s)->Allreduce(v.data(), n, d);
    if (st.ok()) st = (*s)->AllreduceShared(0, n, d);
    if (!st.ok()) {
      std::cerr << st << std::endl;
      return 41;
    }
    for (int64_t i = 0; i < n; ++i) {
      float sum = Awkward(0, i);
      for (int r = 1; r < world; ++r) sum += Awkward(r, i);
      const float want = sum / d;
      for (float got : {v[i], region[i]}) {
        if (std::memcmp(&got, &want, sizeof(float)) != 0 && !(std::isnan(got) && std::isnan(want))) {
          std::cerr << "divisor " << d << ": rank " << rank << " i=" << i << ": " << got << " != " << want
                    << std::endl;
          return 42;
        }
      }
    }
  }
  return 0;
}

TEST(ShmAllreduceTest, MeanIsTheQuotientBitForBitForEveryDivisor) {
  absl::Status s = RunRanks("shmdiv", 2, DivisorsRank);
  EXPECT_TRUE(s.ok()) << s;
}

// Rank 2 joins the setup but never calls Allreduce: rank 0 (timeout 0.3 s)
// returns DEADLINE_EXCEEDED naming it, long before rank 2 goes away, and
// marks the segment aborted, so rank 1 (timeout 20 s) returns ABORTED
// naming rank 0 instead of waiting out its own timeout.
TEST(ShmAllreduceTest, PeerThatNeverArrivesIsNamedAfterTheTimeout) {
  const std::string dir = OutDir("shmlate");
  absl::Status s = LaunchRanks(3, [dir](int rank, int world) -> int {
    c10d::FileStore store(dir + "/store", world);
    const milliseconds timeout(rank == 0 ? 300 : 20000);
    auto shm = ShmAllreduce::Create(Opts(rank, world, 4096, timeout), store);
    if (!shm.ok()) return 30;
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return 0;
    }
    std::vector<float> v(100, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = (*shm)->Allreduce(v.data(), 100);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "rank " << rank << ": " << st << " after " << waited << " s" << std::endl;
    if (rank == 0) {
      if (st.code() != absl::StatusCode::kDeadlineExceeded) return 31;
      if (st.message().find("rank(s) 2 did not arrive") == std::string::npos) return 32;
      if (waited < 0.3) return 33;
    } else {
      if (st.code() != absl::StatusCode::kAborted) return 34;
      if (st.message().find("rank 0 failed") == std::string::npos) return 35;
    }
    if (waited > 2.5) return 36;  // did not wait for rank 2 (3 s) or 20 s
    // The instance is unusable afterwards.
    if ((*shm)->Allreduce(v.data(), 100).code() != absl::StatusCode::kFailedPrecondition) return 37;
    return 0;
  });
  EXPECT_TRUE(s.ok()) << s;
  testutil::RemoveTree(dir);
}

// Rank 1 dies (no destructor runs) after setup: rank 0 gets UNAVAILABLE
// naming it instead of waiting out its 60 s timeout.
TEST(ShmAllreduceTest, PeerThatExitsIsAnErrorAtOnce) {
  const std::string dir = OutDir("shmexit");
  absl::Status s = LaunchRanks(2, [dir](int rank, int world) -> int {
    c10d::FileStore store(dir + "/store", world);
    auto shm = ShmAllreduce::Create(Opts(rank, world, 4096, milliseconds(60000)), store);
    if (!shm.ok()) return 40;
    if (rank == 1) std::_Exit(0);
    std::vector<float> v(5000, 1.0f);
    absl::Status st = (*shm)->Allreduce(v.data(), 5000);
    std::cerr << "rank 0: " << st << std::endl;
    if (st.code() != absl::StatusCode::kUnavailable) return 41;
    if (st.message().find("rank 1") == std::string::npos ||
        st.message().find("exited") == std::string::npos) {
      return 42;
    }
    return 0;
  });
  EXPECT_TRUE(s.ok()) << s;
  testutil::RemoveTree(dir);
}

// Rank 1 never comes to the setup: rank 0 fails after the timeout naming it
// and leaves no segment behind in /dev/shm.
TEST(ShmAllreduceTest, SetupWithoutAPeerTimesOutAndUnlinks) {
  const std::string dir = OutDir("shmsetup");
  absl::Status s = LaunchRanks(2, [dir](int rank, int world) -> int {
    if (rank == 1) return 0;
    c10d::FileStore store(dir + "/store", world);
    auto shm = ShmAllreduce::Create(Opts(rank, world, 4096, milliseconds(300)), store);
    std::cerr << "rank 0: " << shm.status() << std::endl;
    if (shm.ok() || shm.status().code() != absl::StatusCode::kDeadlineExceeded) return 50;
    if (shm.status().message().find("rank(s) 1 did not arrive") == std::string::npos) return 51;
    const std::string prefix = "frameworm-shm-" + std::to_string(::getpid()) + "-";
    DIR* d = ::opendir("/dev/shm");
    if (d == nullptr) return 52;
    int leaked = 0;
    while (dirent* e = ::readdir(d)) leaked += std::string(e->d_name).rfind(prefix, 0) == 0;
    ::closedir(d);
    return leaked == 0 ? 0 : 53;
  });
  EXPECT_TRUE(s.ok()) << s;
  testutil::RemoveTree(dir);
}

TEST(ShmAllreduceTest, BadOptionsAndTooLargeSegmentAreErrors) {
  c10d::HashStore store;
  EXPECT_EQ(ShmAllreduce::Create(Opts(2, 2, 4096, milliseconds(100)), store).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmAllreduce::Create(Opts(0, 0, 4096, milliseconds(100)), store).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmAllreduce::Create(Opts(0, 1, 8, milliseconds(100)), store).status().code(),
            absl::StatusCode::kInvalidArgument);
  // More than /dev/shm can hold: refused at setup, not a SIGBUS later.
  ShmAllreduceOptions big = Opts(0, 1, int64_t{1} << 42, milliseconds(100));
  big.name = "big";
  auto s = ShmAllreduce::Create(big, store);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
  EXPECT_NE(s.status().message().find("/dev/shm"), std::string::npos) << s.status();
  // One rank: a no-op that works.
  ShmAllreduceOptions one = Opts(0, 1, 4096, milliseconds(100));
  one.name = "one";
  auto ok = ShmAllreduce::Create(one, store);
  ASSERT_TRUE(ok.ok()) << ok.status();
  float x[3] = {1, 2, 3};
  EXPECT_TRUE((*ok)->Allreduce(x, 3).ok());
  EXPECT_EQ(x[2], 3.0f);
  EXPECT_EQ((*ok)->Allreduce(nullptr, 3).code(), absl::StatusCode::kInvalidArgument);
  // A divisor of 0 or not finite is refused and changes nothing; the
  // instance stays usable.
  for (float d : {0.0f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    absl::Status bad = (*ok)->Allreduce(x, 3, d);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << d;
    EXPECT_NE(bad.message().find("divisor"), std::string::npos) << bad;
    EXPECT_EQ(x[0], 1.0f);
  }
  EXPECT_TRUE((*ok)->Allreduce(x, 3, 2.0f).ok());
  EXPECT_EQ(x[0], 0.5f);
  EXPECT_EQ(x[2], 1.5f);
  // No shared region asked for: none, and an in-place call is refused.
  EXPECT_EQ((*ok)->shared_buffer(), nullptr);
  EXPECT_EQ((*ok)->AllreduceShared(0, 1).code(), absl::StatusCode::kInvalidArgument);
  ShmAllreduceOptions neg = Opts(0, 1, 4096, milliseconds(100));
  neg.name = "neg";
  neg.shared_bytes = -1;
  EXPECT_EQ(ShmAllreduce::Create(neg, store).status().code(), absl::StatusCode::kInvalidArgument);
  // A region (rounded up to 4 KiB): ranges outside it are refused, naming
  // the range, and the instance stays usable.
  ShmAllreduceOptions reg = Opts(0, 1, 4096, milliseconds(100));
  reg.name = "region";
  reg.shared_bytes = 100;
  auto r = ShmAllreduce::Create(reg, store);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)->shared_floats(), 1024);
  for (auto [off, n] : {std::pair<int64_t, int64_t>{-1, 1}, {0, 1025}, {1024, 1}, {1000, -1},
                        {2, std::numeric_limits<int64_t>::max()}}) {
    absl::Status bad = (*r)->AllreduceShared(off, n);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << off << "+" << n;
    EXPECT_NE(bad.message().find("shared region of 1024 floats"), std::string::npos) << bad;
  }
  // Own addends must be sorted, disjoint pieces of this rank's share.
  const float five[5] = {1, 2, 3, 4, 5};
  const float* p = five;
  for (const auto& bad : std::vector<std::vector<ShmAllreduce::OwnAddend>>{
           {{50, 5, p}, {40, 5, p}}, {{40, 5, p}, {44, 5, p}}, {{-1, 5, p}}, {{96, 5, p}},
           {{0, 0, p}}, {{0, 5, nullptr}}}) {
    absl::Status s = (*r)->AllreduceShared(0, 100, 1.0f, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("sorted, disjoint piece"), std::string::npos) << s;
  }
  ASSERT_TRUE((*r)->AllreduceShared(0, 100, 2.0f, {{10, 5, p}}).ok());  // a world of one
  EXPECT_EQ((*r)->shared_buffer()[14], 2.5f);
  (*r)->shared_buffer()[1023] = 3.0f;
  EXPECT_TRUE((*r)->AllreduceShared(1023, 1, 2.0f).ok());
  EXPECT_EQ((*r)->shared_buffer()[1023], 1.5f);
  EXPECT_TRUE((*r)->AllreduceShared(1024, 0).ok());
}

}  // namespace
}  // namespace frameworm
