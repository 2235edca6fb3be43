// P3: rendezvous of N simulated ranks through a real frameworm-coordinator.
//
// One run: start frameworm-coordinator (fresh --state-dir), register N
// simulated workers with 1 slot each and open their Session streams (a
// heartbeat first, so each attaches), then submit a job with nodes
// min = max = N, nproc_per_node = 1 and time SubmitJob -> every worker has
// its StartTask. Checks that the ranks are exactly 0..N-1, one per worker,
// WORLD_SIZE = N, and that MASTER_ADDR/MASTER_PORT and the generation are
// the same for every rank. Prints one JSON line; exits 1 on any failure.
//
// usage: p3_rendezvous_bench --ranks=N [--coordinator=PATH] [--channels=8]
//                            [--state-dir=DIR]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/p3_sim_cluster.h"

namespace fb = frameworm::bench;
namespace v1 = frameworm::v1;
namespace fs = std::filesystem;

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "p3_rendezvous_bench: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--ranks=", 0) && a.rfind("--coordinator=", 0) &&
        a.rfind("--channels=", 0) && a.rfind("--state-dir=", 0))
      return Fail(absl::StrCat("unknown argument '", a,
                               "' (flags: --ranks --coordinator --channels "
                               "--state-dir)"));
  }
  const std::string self_dir = fs::path(argv[0]).parent_path().string();
  std::string coord_bin =
      *fb::FlagValue(argc, argv, "coordinator",
                     (fs::path(self_dir) / "frameworm-coordinator").string());
  int n = 0, channels = 0;
  if (!absl::SimpleAtoi(*fb::FlagValue(argc, argv, "ranks", ""), &n) || n < 1)
    return Fail("--ranks must be a positive integer");
  if (!absl::SimpleAtoi(*fb::FlagValue(argc, argv, "channels", "8"), &channels) ||
      channels < 1)
    return Fail("--channels must be a positive integer");
  // Each simulated worker's Session stream stays open; a connection
  // carries at most 256 open calls (rpc/rpc.h max_streams_per_connection).
  if ((n + channels - 1) / channels > 256)
    return Fail("--channels must be at least ranks / 256 (a connection carries at most 256 "
                "open sessions)");
  std::string state_dir = *fb::FlagValue(argc, argv, "state-dir", "");

  auto coord = fb::CoordinatorProcess::Start(
      {coord_bin, state_dir, {"--heartbeat-timeout=60s"}});
  if (!coord.ok()) return Fail(coord.status().ToString());
  const std::string target = (*coord)->address();

  int rc = 0;
  std::string json;
  {
    fb::SimCluster cluster({.target = target,
                            .workers = n,
                            .channels = channels,
                            .heartbeat_interval_s = 0.5});
    const auto t_reg0 = std::chrono::steady_clock::now();
    absl::Status s = cluster.RegisterAll(std::chrono::seconds(60));
    const auto t_reg1 = std::chrono::steady_clock::now();
    if (s.ok()) s = cluster.OpenSessionsAndWaitAlive(std::chrono::seconds(60));
    const auto t_alive = std::chrono::steady_clock::now();
    if (!s.ok()) return Fail(absl::StrCat("registration: ", s.ToString()));

    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> job =
        fb::SubmitGangJob(target, "p3-rendezvous", n, std::chrono::seconds(60));
    const auto t_submitted = std::chrono::steady_clock::now();
    if (!job.ok()) return Fail(job.status().ToString());
    s = cluster.WaitAllStarted(std::chrono::seconds(60));
    if (!s.ok()) return Fail(absl::StrCat("rendezvous: ", s.ToString()));

    // Verify the assignment.
    std::vector<fb::ReceivedTask> got = cluster.Received();
    std::set<int> ranks;
    const v1::TaskSpec& first = got[0].task;
    auto t_first = got[0].at, t_last = got[0].at;
    std::string problem;
    for (int w = 0; w < n && problem.empty(); ++w) {
      const v1::TaskSpec& t = got[w].task;
      t_first = std::min(t_first, got[w].at);
      t_last = std::max(t_last, got[w].at);
      if (!ranks.insert(t.rank()).second)
        problem = absl::StrCat("rank ", t.rank(), " assigned twice");
      else if (t.rank() < 0 || t.rank() >= n)
        problem = absl::StrCat("rank ", t.rank(), " outside 0..", n - 1);
      else if (t.world_size() != n)
        problem = absl::StrCat("world_size ", t.world_size(), " != ", n);
      else if (t.ref().job_id() != *job ||
               t.ref().generation() != first.ref().generation())
        problem = absl::StrCat("worker ", w, " got job ", t.ref().job_id(),
                               " generation ", t.ref().generation());
      else if (t.master_addr() != first.master_addr() ||
               t.master_port() != first.master_port() ||
               t.master_addr().empty() || t.master_port() <= 0)
        problem = absl::StrCat("worker ", w, " got MASTER ", t.master_addr(),
                               ":", t.master_port(), ", worker 0 got ",
                               first.master_addr(), ":", first.master_port());
      else if (!t.env().empty())  // the job sets no env: ranks travel typed
        problem = absl::StrCat("worker ", w, " got ", t.env_size(),
                               " env entries; the job has none");
    }
    if (problem.empty() && static_cast<int>(ranks.size()) != n)
      problem = absl::StrCat(ranks.size(), " distinct ranks, want ", n);
    if (!problem.empty()) {
      rc = Fail(absl::StrCat("verification: ", problem));
    } else {
      json = absl::StrCat(
          "{\"ranks\":", n, ",\"register_rpc_s\":", fb::Seconds(t_reg0, t_reg1),
          ",\"register_attach_s\":", fb::Seconds(t_reg0, t_alive),
          ",\"submit_rpc_s\":", fb::Seconds(t0, t_submitted),
          ",\"first_start_s\":", fb::Seconds(t0, t_first),
          ",\"rendezvous_s\":", fb::Seconds(t0, t_last),
          ",\"master\":\"", first.master_addr(), ":", first.master_port(),
          "\",\"generation\":", first.ref().generation(),
          ",\"coordinator_cpu_s\":", (*coord)->CpuSeconds(), "}");
    }
    cluster.Shutdown();
  }
  (*coord)->Stop();
  if (rc == 0) std::printf("%s\n", json.c_str());
  return rc;
}
