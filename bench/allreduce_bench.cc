// P2: allreduce bus bandwidth between ranks over Frameworm's process group
// (CreateProcessGroup, Gloo on CPUs) and over the intra-node shared-memory
// allreduce the trainer uses when every rank is local (ShmAllreduce, 256
// KiB slots as in the trainer; P2_SHM_CAPACITY overrides; "shm" copies a
// buffer through the slots, "shm-inplace" sums one that lies in the shared
// region, as the trainer's gradient buckets do), against the ring bound
// 2(n-1)/n * S / B with B the loopback TCP bandwidth measured in the same
// run (rank 0, one stream, before the collectives). The sizes are 0.94
// (the MLP's gradients), 4, 25 and 100 MB; P2_SIZES=<bytes>,<bytes>,.. replaces them (e.g. 940000, the
// MLP's gradients) and P2_ITERS the 7 timed calls per size.
//
// Run as every rank with torchrun's variables (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT); bench/p2_allreduce.sh starts the ranks.
// Rank 0 prints one JSON line per size:
//   {"path":"gloo"|"shm"|"shm-inplace","bytes":..,"median_s":..,"bus_gbps":..,
//    "loopback_gbps":..,"efficiency":..}
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "train/process_group.h"
#include "train/shm_allreduce.h"

namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// One TCP stream over 127.0.0.1: bytes per second for `total` bytes.
double LoopbackBandwidth(size_t total) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  std::thread receiver([&] {
    int fd = accept(listener, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    size_t got = 0;
    while (got < total) {
      ssize_t n = read(fd, buf.data(), buf.size());
      if (n <= 0) break;
      got += n;
    }
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::vector<char> buf(1 << 20, 1);
  auto t0 = std::chrono::steady_clock::now();
  size_t sent = 0;
  while (sent < total) {
    ssize_t n = write(fd, buf.data(), std::min(buf.size(), total - sent));
    if (n <= 0) break;
    sent += n;
  }
  close(fd);
  receiver.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(listener);
  return static_cast<double>(sent) / s;
}

}  // namespace

int main() {
  torch::set_num_threads(1);
  frameworm::ProcessGroupOptions o;
  o.backend = "gloo";
  o.rank = EnvInt("RANK", 0);
  o.world_size = EnvInt("WORLD_SIZE", 1);
  o.master_addr = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  o.master_port = EnvInt("MASTER_PORT", 29500);
  const int iters = EnvInt("P2_ITERS", 7);
  std::vector<size_t> sizes;
  if (const char* v = std::getenv("P2_SIZES")) {
    for (const char* p = v; *p != 0;) {
      char* end = nullptr;
      const unsigned long long b = std::strtoull(p, &end, 10);
      if (end == p || b < 4 || b > (size_t{1} << 34) || (*end != 0 && *end != ',')) {
        std::fprintf(stderr, "allreduce_bench: P2_SIZES must be byte counts from 4 to 16 GiB "
                             "separated by commas, not '%s'\n", v);
        return 2;
      }
      sizes.push_back(static_cast<size_t>(b));
      p = *end == ',' ? end + 1 : end;
    }
  } else {
    sizes = {940000, 4000000, 25000000, 100000000};
  }
  double loopback = 0;
  if (o.rank == 0) {
    std::vector<double> bws;
    for (int i = 0; i < 3; ++i) bws.push_back(LoopbackBandwidth(size_t{1} << 30));
    std::sort(bws.begin(), bws.end());
    loopback = bws[1];
  }
  auto pg = frameworm::CreateProcessGroup(o);
  if (!pg.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", pg.status().ToString().c_str());
    return 1;
  }
  const int n = o.world_size;
  std::unique_ptr<frameworm::ShmAllreduce> shm;
  {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = false;
    so.waitWorkers = false;
    c10d::TCPStore store(o.master_addr, so);
    frameworm::ShmAllreduceOptions sa;
    sa.name = "allreduce_bench";
    sa.rank = o.rank;
    sa.world_size = n;
    sa.capacity_bytes = EnvInt("P2_SHM_CAPACITY", 256 << 10);
    sa.shared_bytes = static_cast<int64_t>(*std::max_element(sizes.begin(), sizes.end()));
    auto s = frameworm::ShmAllreduce::Create(sa, store);
    if (!s.ok()) {
      std::fprintf(stderr, "allreduce_bench: %s\n", s.status().ToString().c_str());
      return 1;
    }
    shm = std::move(*s);
  }
  for (const char* path : {"gloo", "shm", "shm-inplace"}) {
    const bool use_shm = std::string(path) == "shm";
    const bool in_place = std::string(path) == "shm-inplace";
    for (size_t bytes : sizes) {
      const int64_t count = static_cast<int64_t>(bytes / 4);
      std::vector<at::Tensor> t{in_place ? torch::from_blob(shm->shared_buffer(), {count})
                                         : torch::ones({count})};
      if (in_place) t[0].fill_(1.0f);
      std::vector<double> times;
      for (int i = 0; i < iters + 1; ++i) {
        std::vector<at::Tensor> barrier{torch::zeros({1})};
        (*pg)->allreduce(barrier)->wait();
        auto t0 = std::chrono::steady_clock::now();
        if (use_shm || in_place) {
          absl::Status st = in_place ? shm->AllreduceShared(0, count)
                                     : shm->Allreduce(t[0].data_ptr<float>(), t[0].numel());
          if (!st.ok()) {
            std::fprintf(stderr, "allreduce_bench: %s\n", st.ToString().c_str());
            return 1;
          }
        } else {
          (*pg)->allreduce(t)->wait();
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) times.push_back(s);  // first one warms up
      }
      std::sort(times.begin(), times.end());
      double median = times[times.size() / 2];
      double bus = 2.0 * (n - 1) / n * static_cast<double>(bytes) / median;
      if (o.rank == 0) {
        std::printf(
            "{\"path\":\"%s\",\"bytes\":%zu,\"ranks\":%d,\"median_s\":%.6f,"
            "\"bus_gbps\":%.3f,\"loopback_gbps\":%.3f,\"efficiency\":%.3f}\n",
            path, bytes, n, median, bus * 8 / 1e9, loopback * 8 / 1e9, bus / loopback);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
