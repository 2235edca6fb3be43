#include "train/shm_allreduce.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace frameworm {
namespace {

constexpr uint64_t kMagic = 0x6672776d73686d32ULL;  // "frwmshm2"
constexpr size_t kLine = 64;
constexpr int32_t kDeparted = -1;

size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// The element-wise sums of the reduce step. -O2 leaves these loops scalar;
// each is built vectorized for AVX-512, AVX2 and the SSE2 baseline and the
// loader picks the one this CPU runs (target_clones). Per element the
// additions happen in the same order as the scalar loop, so results stay
// bit-identical on every rank and every CPU.
#if defined(__x86_64__)
#define FRAMEWORM_VECTOR_LOOP \
  __attribute__((target_clones("avx512f", "avx2", "default"), optimize("tree-vectorize")))
#else
#define FRAMEWORM_VECTOR_LOOP __attribute__((optimize("tree-vectorize")))
#endif

// own[j] = dst[j] = (own[j] + other[j]) / d (for two ranks the order of
// the two addends does not change a float sum)
FRAMEWORM_VECTOR_LOOP void AddPairInPlace(float* own, const float* __restrict other,
                                          float* __restrict dst, int64_t m, float d) {
  for (int64_t j = 0; j < m; ++j) {
    const float v = (own[j] + other[j]) / d;
    dst[j] = v;
    own[j] = v;
  }
}

// dst[j] = a[j] + b[j]
FRAMEWORM_VECTOR_LOOP void Sum(const float* __restrict a, const float* __restrict b,
                               float* __restrict dst, int64_t m) {
  for (int64_t j = 0; j < m; ++j) dst[j] = a[j] + b[j];
}

// dst[j] += a[j]
FRAMEWORM_VECTOR_LOOP void AddTo(const float* __restrict a, float* __restrict dst, int64_t m) {
  for (int64_t j = 0; j < m; ++j) dst[j] += a[j];
}

// dst[j] = own[j] = dst[j] / d
FRAMEWORM_VECTOR_LOOP void DivideCopy(float* __restrict dst, float* __restrict own, int64_t m,
                                      float d) {
  for (int64_t j = 0; j < m; ++j) {
    const float v = dst[j] / d;
    dst[j] = v;
    own[j] = v;
  }
}

// own[j] = peer[j] = (a[j] + peer[j]) / d, where `a` may be `own`: the mean
// into both ranks' regions in one pass.
FRAMEWORM_VECTOR_LOOP void AddPairIntoBoth(const float* a, float* own, float* __restrict peer,
                                           int64_t m, float d) {
  for (int64_t j = 0; j < m; ++j) {
    const float v = (a[j] + peer[j]) / d;
    own[j] = v;
    peer[j] = v;
  }
}

// The same two with the mean taken as a product with r = 1 / d, used when
// d is a power of two: then x * r is x / d exactly (both round the same
// real number), and a product is several times cheaper than a quotient.
FRAMEWORM_VECTOR_LOOP void AddPairInPlaceScaled(float* own, const float* __restrict other,
                                                float* __restrict dst, int64_t m, float r) {
  for (int64_t j = 0; j < m; ++j) {
    const float v = (own[j] + other[j]) * r;
    dst[j] = v;
    own[j] = v;
  }
}
FRAMEWORM_VECTOR_LOOP void AddPairIntoBothScaled(const float* a, float* own, float* __restrict peer,
                                                 int64_t m, float r) {
  for (int64_t j = 0; j < m; ++j) {
    const float v = (a[j] + peer[j]) * r;
    own[j] = v;
    peer[j] = v;
  }
}

// 1 / d when d is a power of two (the reciprocal is then exact), else 0.
float ExactReciprocal(float d) {
  int e = 0;
  const float f = std::frexp(d, &e);
  if (std::fabs(f) != 0.5f || e < -125 || e > 126) return 0.0f;
  return 1.0f / d;
}

// dst[j] /= d
FRAMEWORM_VECTOR_LOOP void Divide(float* __restrict dst, int64_t m, float d) {
  for (int64_t j = 0; j < m; ++j) dst[j] /= d;
}

std::string Errno(const char* what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// True when process `pid` no longer runs (gone, or a zombie not reaped).
bool ProcessGone(int32_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(f, s)) return false;
  const size_t p = s.rfind(')');
  if (p == std::string::npos || p + 2 >= s.size()) return false;
  const char state = s[p + 2];
  return state == 'Z' || state == 'X';
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::string Bytes(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

struct ShmAllreduce::Header {
  uint64_t magic;
  int32_t world;
  int32_t pad;
  int64_t capacity;
  std::atomic<int32_t> aborted_by;  // -1: none, else the rank that failed
  // Broadcast's two buffers, used alternately.
  alignas(kLine) int64_t broadcast[2][ShmAllreduce::kMaxBroadcastValues];
};

struct alignas(kLine) ShmAllreduce::RankBlock {
  std::atomic<uint64_t> arrived;  // barrier epochs this rank has reached
  std::atomic<int32_t> pid;       // kDeparted after its destructor ran
};

ShmAllreduce::RankBlock* ShmAllreduce::block(int r) const {
  auto* p = static_cast<char*>(base_) + RoundUp(sizeof(Header), kLine);
  return reinterpret_cast<RankBlock*>(p) + r;
}

float* ShmAllreduce::slot(int r) const {
  auto* p = static_cast<char*>(base_) + RoundUp(sizeof(Header), kLine) +
            RoundUp(sizeof(RankBlock) * world_, 4096);
  return reinterpret_cast<float*>(p + static_cast<size_t>(capacity_) * r);
}

float* ShmAllreduce::result() const { return slot(world_); }

float* ShmAllreduce::region(int r) const {
  return slot(world_ + 1) + shared_floats_ * r;
}

absl::StatusOr<std::unique_ptr<ShmAllreduce>> ShmAllreduce::Create(
    const ShmAllreduceOptions& o, c10d::Store& store) {
  if (o.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shm allreduce: world_size must be >= 1, got ", o.world_size));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("shm allreduce: rank ", o.rank, " outside [0, ", o.world_size, ")"));
  }
  if (o.capacity_bytes < static_cast<int64_t>(kLine)) {
    return absl::InvalidArgumentError(absl::StrCat("shm allreduce: capacity_bytes must be >= 64, got ", o.capacity_bytes));
  }
  std::unique_ptr<ShmAllreduce> s(new ShmAllreduce());
  s->rank_ = o.rank;
  s->world_ = o.world_size;
  s->capacity_ = static_cast<int64_t>(RoundUp(o.capacity_bytes, kLine));
  s->timeout_ = o.timeout;
  if (o.shared_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("shm allreduce: shared_bytes must be >= 0, got ", o.shared_bytes));
  }
  const int64_t shared = static_cast<int64_t>(RoundUp(static_cast<size_t>(o.shared_bytes), 4096));
  s->shared_floats_ = shared / static_cast<int64_t>(sizeof(float));
  s->size_ = RoundUp(sizeof(Header), kLine) + RoundUp(sizeof(RankBlock) * s->world_, 4096) +
             static_cast<size_t>(s->capacity_) * (s->world_ + 1) +
             static_cast<size_t>(shared) * s->world_;
  const std::string name_key = o.name + "/segment";
  auto status_key = [&](int r) { return absl::StrCat(o.name, "/status/", r); };

  // Step 1: rank 0 creates, initialises and publishes the segment; the
  // others look the name up and map it.
  absl::Status local = absl::OkStatus();
  auto map = [&](int fd) {
    void* p = ::mmap(nullptr, s->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      local = absl::UnavailableError(Errno("mmap"));
    } else {
      s->base_ = p;
    }
  };
  try {
    if (o.rank == 0) {
      std::random_device rd;
      char suffix[17];
      std::snprintf(suffix, sizeof(suffix), "%08x%08x", rd(), rd());
      s->segment_name_ = absl::StrCat("/frameworm-shm-", ::getpid(), "-", suffix);
      const int fd = ::shm_open(s->segment_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) {
        local = absl::ResourceExhaustedError(Errno(absl::StrCat("shm_open(", s->segment_name_, ")").c_str()));
        s->segment_name_.clear();
      } else {
        if (int e = ::posix_fallocate(fd, 0, static_cast<off_t>(s->size_)); e != 0) {
          local = absl::ResourceExhaustedError(absl::StrCat(
              "reserving ", s->size_, " bytes of shared memory for ", s->segment_name_,
              " failed (is /dev/shm too small?): ", std::strerror(e)));
        } else {
          map(fd);
        }
        ::close(fd);
      }
      if (local.ok()) {
        auto* h = static_cast<Header*>(s->base_);
        h->world = s->world_;
        h->capacity = s->capacity_;
        new (&h->aborted_by) std::atomic<int32_t>(-1);
        for (int r = 0; r < s->world_; ++r) new (s->block(r)) RankBlock{{0}, {0}};
        s->block(0)->pid.store(static_cast<int32_t>(::getpid()));
        std::atomic_thread_fence(std::memory_order_seq_cst);
        h->magic = kMagic;
      }
      store.set(name_key, Bytes(local.ok() ? s->segment_name_ : "error:" + local.ToString()));
    } else {
      store.wait({name_key}, o.timeout);
      const std::string v = Bytes(store.get(name_key));
      if (v.rfind("error:", 0) == 0) {
        local = absl::UnavailableError(absl::StrCat("rank 0 could not create the segment: ", v.substr(6)));
      } else {
        s->segment_name_ = v;
        const int fd = ::shm_open(v.c_str(), O_RDWR, 0600);
        if (fd < 0) {
          local = absl::UnavailableError(Errno(absl::StrCat("shm_open(", v, ")").c_str()));
        } else {
          struct stat st;
          if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != s->size_) {
            local = absl::UnavailableError(absl::StrCat(
                "segment ", v, " has the wrong size (ranks disagree on capacity or world size?)"));
          } else {
            map(fd);
          }
          ::close(fd);
        }
      }
      if (local.ok()) {
        auto* h = static_cast<Header*>(s->base_);
        if (h->magic != kMagic || h->world != s->world_ || h->capacity != s->capacity_) {
          local = absl::UnavailableError("segment header does not match this rank's options");
        } else {
          s->block(o.rank)->pid.store(static_cast<int32_t>(::getpid()));
        }
      }
    }
    // Step 2: every rank posts its outcome and reads everyone's.
    store.set(status_key(o.rank), Bytes(local.ok() ? std::string("ok") : local.ToString()));
  } catch (const c10::Error& e) {
    local = absl::UnavailableError(absl::StrCat("store: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    local = absl::UnavailableError(absl::StrCat("store: ", e.what()));
  }
  std::vector<std::string> failed, missing;
  if (local.ok()) {
    for (int r = 0; r < o.world_size; ++r) {
      if (r == o.rank) continue;
      try {
        store.wait({status_key(r)}, o.timeout);
        const std::string v = Bytes(store.get(status_key(r)));
        if (v != "ok") failed.push_back(absl::StrCat("rank ", r, ": ", v));
      } catch (const std::exception&) {
        missing.push_back(std::to_string(r));
      }
    }
  }
  if (o.rank == 0 && !s->segment_name_.empty()) ::shm_unlink(s->segment_name_.c_str());
  // Step 3: nobody returns before the name is gone.
  const std::string unlinked_key = o.name + "/unlinked";
  if (local.ok() && failed.empty() && missing.empty()) {
    try {
      if (o.rank == 0) {
        store.set(unlinked_key, Bytes(std::string("1")));
      } else {
        store.wait({unlinked_key}, o.timeout);
      }
    } catch (const std::exception&) {
      missing.push_back("0");
    }
  }
  const std::string who = absl::StrCat("shm allreduce setup (rank ", o.rank, "/", o.world_size, ")");
  if (!local.ok()) return absl::Status(local.code(), absl::StrCat(who, ": ", local.message()));
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        who, ": rank(s) ", absl::StrJoin(missing, ", "), " did not arrive within ",
        o.timeout.count(), " ms"));
  }
  if (!failed.empty()) {
    return absl::UnavailableError(absl::StrCat(who, ": ", absl::StrJoin(failed, "; ")));
  }
  return s;
}

ShmAllreduce::~ShmAllreduce() {
  if (base_ == nullptr) return;
  block(rank_)->pid.store(kDeparted);
  ::munmap(base_, size_);
}

absl::Status ShmAllreduce::Fail(absl::Status s) {
  auto* h = static_cast<Header*>(base_);
  int32_t none = -1;
  h->aborted_by.compare_exchange_strong(none, rank_);
  broken_ = s;
  return s;
}

absl::Status ShmAllreduce::Barrier() {
  const uint64_t target = ++epoch_;
  block(rank_)->arrived.store(target, std::memory_order_release);
  auto* h = static_cast<Header*>(base_);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout_;
  auto next_check = start + std::chrono::milliseconds(2);
  uint64_t spins = 0;
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    RankBlock* b = block(r);
    while (b->arrived.load(std::memory_order_acquire) < target) {
      ++spins;
      if (spins < 256) {
        CpuRelax();
        continue;
      }
      ::sched_yield();
      if ((spins & 15) != 0) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now < next_check) continue;
      next_check = now + std::chrono::milliseconds(2);
      const int32_t ab = h->aborted_by.load(std::memory_order_acquire);
      if (ab >= 0 && ab != rank_) {
        return Fail(absl::AbortedError(absl::StrCat(
            "shm allreduce (rank ", rank_, "): rank ", ab, " failed a collective and aborted it")));
      }
      for (int q = 0; q < world_; ++q) {
        if (q == rank_ || block(q)->arrived.load(std::memory_order_acquire) >= target) continue;
        const int32_t pid = block(q)->pid.load(std::memory_order_acquire);
        if (pid == kDeparted || ProcessGone(pid)) {
          return Fail(absl::UnavailableError(absl::StrCat(
              "shm allreduce (rank ", rank_, "): rank ", q, " (pid ", pid,
              pid == kDeparted ? ") closed its shm allreduce" : ") exited", " before the collective completed")));
        }
      }
      if (now >= deadline) {
        std::vector<std::string> late;
        for (int q = 0; q < world_; ++q) {
          if (q != rank_ && block(q)->arrived.load(std::memory_order_acquire) < target) {
            late.push_back(std::to_string(q));
          }
        }
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            "shm allreduce (rank ", rank_, "): rank(s) ", absl::StrJoin(late, ", "),
            " did not arrive within ", timeout_.count(), " ms")));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ShmAllreduce::Broadcast(int64_t* values, int n, int root) {
  if (n < 0 || n > kMaxBroadcastValues || (n > 0 && values == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm broadcast: ", n, " values (at most ", kMaxBroadcastValues, ", and a buffer)"));
  }
  if (root < 0 || root >= world_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm broadcast: root ", root, " outside [0, ", world_, ")"));
  }
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  int64_t* buffer = static_cast<Header*>(base_)->broadcast[broadcasts_++ & 1];
  // The barrier's release store publishes the root's writes; its acquire
  // loads make them visible to the others.
  if (rank_ == root) std::memcpy(buffer, values, sizeof(int64_t) * static_cast<size_t>(n));
  if (absl::Status s = Barrier(); !s.ok()) return s;
  if (rank_ != root) std::memcpy(values, buffer, sizeof(int64_t) * static_cast<size_t>(n));
  return absl::OkStatus();
}

absl::Status ShmAllreduce::CheckUsable() const {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shm allreduce is unusable after an earlier error: ", broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status ShmAllreduce::CheckCall(float divisor) const {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (!std::isfinite(divisor) || divisor == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm allreduce: the divisor must be finite and not 0, not ", divisor));
  }
  return absl::OkStatus();
}

absl::Status ShmAllreduce::Allreduce(float* data, int64_t n, float divisor) {
  if (absl::Status s = CheckCall(divisor); !s.ok()) return s;
  if (n < 0 || (n > 0 && data == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("shm allreduce: bad buffer (n=", n, ")"));
  }
  if (n == 0) return absl::OkStatus();
  if (world_ == 1) {
    if (divisor != 1) Divide(data, n, divisor);
    return absl::OkStatus();
  }
  const int64_t cap = capacity_ / static_cast<int64_t>(sizeof(float));
  const float reciprocal = ExactReciprocal(divisor);  // 0: divide
  float* mine = slot(rank_);
  float* out = result();
  for (int64_t off = 0; off < n; off += cap) {
    const int64_t len = std::min(cap, n - off);
    // This rank's share, in whole cache lines (16 floats).
    int64_t share = (len + world_ - 1) / world_;
    share = (share + 15) / 16 * 16;
    const int64_t lo = std::min(len, share * rank_);
    const int64_t hi = std::min(len, lo + share);
    // Only what the others reduce goes into the slot: this rank reads its
    // own share straight from `data`.
    std::memcpy(mine, data + off, static_cast<size_t>(lo) * sizeof(float));
    std::memcpy(mine + hi, data + off + hi, static_cast<size_t>(len - hi) * sizeof(float));
    if (absl::Status s = Barrier(); !s.ok()) return s;
    if (hi > lo) {
      // Into the result area for the others and straight into `data` for
      // this rank (saves copying this share back out).
      float* dst = out + lo;
      float* own = data + off + lo;
      const int64_t m = hi - lo;
      if (world_ == 2) {
        if (reciprocal != 0) {
          AddPairInPlaceScaled(own, slot(1 - rank_) + lo, dst, m, reciprocal);
        } else {
          AddPairInPlace(own, slot(1 - rank_) + lo, dst, m, divisor);
        }
      } else {
        // In rank order, with this rank's addend read from `data`.
        auto addend = [&](int r) -> const float* { return r == rank_ ? own : slot(r) + lo; };
        Sum(addend(0), addend(1), dst, m);
        for (int r = 2; r < world_; ++r) AddTo(addend(r), dst, m);
        DivideCopy(dst, own, m, divisor);
      }
    }
    if (absl::Status s = Barrier(); !s.ok()) return s;
    if (lo > 0) std::memcpy(data + off, out, static_cast<size_t>(lo) * sizeof(float));
    if (hi < len) {
      std::memcpy(data + off + hi, out + hi, static_cast<size_t>(len - hi) * sizeof(float));
    }
  }
  return absl::OkStatus();
}

std::pair<int64_t, int64_t> ShmAllreduce::SharedShare(int64_t n) const {
  int64_t share = (n + world_ - 1) / world_;
  share = (share + 15) / 16 * 16;  // whole cache lines
  return {std::min(n, share * rank_), std::min(n, share * (rank_ + 1))};
}

absl::Status ShmAllreduce::AllreduceShared(int64_t offset, int64_t n, float divisor,
                                           const std::vector<OwnAddend>& own_addends) {
  if (absl::Status s = CheckCall(divisor); !s.ok()) return s;
  if (offset < 0 || n < 0 || offset > shared_floats_ || n > shared_floats_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm allreduce: [", offset, ", ", offset, " + ", n, ") is not inside this rank's shared region of ",
        shared_floats_, " floats"));
  }
  const auto [lo, hi] = SharedShare(n);
  int64_t next = lo;
  for (const OwnAddend& p : own_addends) {
    if (p.src == nullptr || p.len <= 0 || p.begin < next || p.begin > hi || p.len > hi - p.begin) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shm allreduce: addend [", p.begin, ", ", p.begin, " + ", p.len,
          ") is not a sorted, disjoint piece of this rank's share [", lo, ", ", hi, ")"));
    }
    next = p.begin + p.len;
  }
  if (n == 0) return absl::OkStatus();
  float* own = region(rank_) + offset;
  if (world_ == 1) {
    for (const OwnAddend& p : own_addends) {
      std::memcpy(own + p.begin, p.src, static_cast<size_t>(p.len) * sizeof(float));
    }
    if (divisor != 1) Divide(own, n, divisor);
    return absl::OkStatus();
  }
  // Every rank's buffer is complete before anyone reads it.
  if (absl::Status s = Barrier(); !s.ok()) return s;
  // This rank's share in segments whose own addend lies in one place (the
  // region, or one of `own_addends`), reduced in rank order, the mean
  // written into every rank's region (each peer's addend there is read
  // before it is overwritten; no one else touches this share).
  const float reciprocal = ExactReciprocal(divisor);  // 0: divide
  auto reduce = [&](int64_t a, int64_t b, const float* mine) {
    if (world_ == 2) {
      if (reciprocal != 0) {
        AddPairIntoBothScaled(mine, own + a, region(1 - rank_) + offset + a, b - a, reciprocal);
      } else {
        AddPairIntoBoth(mine, own + a, region(1 - rank_) + offset + a, b - a, divisor);
      }
      return;
    }
    auto addend = [&](int r) -> const float* {
      return r == rank_ ? mine : region(r) + offset + a;
    };
    constexpr int64_t kBlock = 2048;
    alignas(64) float tmp[kBlock];
    for (int64_t k = 0; k < b - a; k += kBlock) {
      const int64_t m = std::min(kBlock, b - a - k);
      Sum(addend(0) + k, addend(1) + k, tmp, m);
      for (int r = 2; r < world_; ++r) AddTo(addend(r) + k, tmp, m);
      DivideCopy(tmp, own + a + k, m, divisor);
      for (int r = 0; r < world_; ++r) {
        if (r != rank_) std::memcpy(region(r) + offset + a + k, tmp, static_cast<size_t>(m) * sizeof(float));
      }
    }
  };
  int64_t at = lo;
  for (const OwnAddend& p : own_addends) {
    if (p.begin > at) reduce(at, p.begin, own + at);
    reduce(p.begin, p.begin + p.len, p.src);
    at = p.begin + p.len;
  }
  if (hi > at) reduce(at, hi, own + at);
  // Every share's mean is in every region. No third barrier: a region is
  // next written by its owner, after this one, and read by a peer only
  // after the next call's first barrier.
  return Barrier();
}

}  // namespace frameworm
