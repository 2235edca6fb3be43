// P8 goodput (issue #10): the same job undisturbed and then with a kill -9
// every --every-s seconds (seeded: a random rank's trainer, or the worker
// running a random rank, which is started again 1 s later), each on a fresh
// cluster (coordinator + 3 single-slot workers on 127.0.0.1, the e2e
// harness). The job: 2 nodes x 1 process, the CNN on Fashion-MNIST for 3
// epochs (batch 32 per rank), disk checkpoints every --checkpoint-every
// steps, heartbeat timeout 4 s. Per failure: the newest step the
// coordinator heard of in the generation the kill ended (polled from the
// kill until that generation is over, at most 2 s: the trainers' reports
// come in batches up to 50 ms apart, and the surviving rank's last batch
// arrives after the kill; the killed trainer's unsent last batch does not,
// so this can still be short by a step or two) and the step of the
// checkpoint the next generation loaded (rank 0's "resumed" event; 0: it
// started over); steps lost = the difference. Prints one JSON line
// per failure, then a summary: goodput = undisturbed wall / disturbed wall,
// both accuracies. Usage:
//   p8_goodput [--every-s=30] [--seed=1] [--checkpoint-every=50]
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/process.h"

namespace fe = frameworm::e2e;
namespace v1 = frameworm::v1;

namespace {

struct Run {
  bool ok = false;
  double wall_s = 0;
  double accuracy = -1;
  int restarts = 0;
  int64_t steps = 0;
  std::string error;
};

// Rank 0's "resumed" events in the job's log (every generation's): how
// many, and the step of the last one's checkpoint (ckpt-<step>.pt; -1 if
// none).
std::pair<int, int64_t> Resumes(fe::Cluster& c, const std::string& id) {
  const std::string out = c.Cli({"logs", id, "--rank", "0"}).output;
  const std::string key = "\"event\":\"resumed\",\"path\":\"";
  int n = 0;
  int64_t step = -1;
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1)) {
    ++n;
    const size_t end = out.find('"', at + key.size());
    const std::string path = out.substr(at + key.size(), end - at - key.size());
    const size_t c = path.rfind("ckpt-");
    int64_t v = -1;
    if (c != std::string::npos &&
        absl::SimpleAtoi(path.substr(c + 5, path.size() - c - 5 - 3), &v)) {
      step = v;
    }
  }
  return {n, step};
}

// disturb: false for the undisturbed run.
Run RunJob(double every_s, uint64_t seed, int64_t checkpoint_every, bool disturb) {
  Run out;
  fe::ClusterOptions o;
  o.workers = 3;
  auto c = fe::Cluster::Start(o);
  if (!c.ok()) {
    out.error = c.status().ToString();
    return out;
  }
  fe::Cluster& cl = **c;
  auto id = cl.Submit(absl::StrCat(
      "name: p8\nnodes: 2\nnproc_per_node: 1\nbackend: gloo\nmax_restarts: 100\n"
      "heartbeat_timeout: 4\ntrain:\n  model: cnn\n  dataset: fashion-mnist\n  epochs: 3\n"
      "  batch_size: 32\ncheckpoint:\n  every_n_steps: ",
      checkpoint_every, "\n  keep_last: 2\n"));
  if (!id.ok()) {
    out.error = id.status().ToString();
    return out;
  }
  std::mt19937_64 rng(seed);
  const absl::Time start = absl::Now();
  absl::Time next_kill = start + absl::Seconds(every_s);
  v1::JobStatus st;
  int failure = 0;
  while (absl::Now() - start < absl::Seconds(1200)) {
    auto s = cl.GetJob(*id);
    if (s.ok()) st = *s;
    if (fe::IsFinal(st.state())) break;
    if (disturb && absl::Now() >= next_kill && st.workers_size() == 2) {
      const int rank = static_cast<int>(rng() % 2);
      const bool worker = rng() % 2 == 1;
      int64_t step_before = st.step();
      const int64_t gen_before = st.generation();
      const int resumes_before = Resumes(cl, *id).first;
      const absl::Time killed = absl::Now();
      if (worker) {
        const int w = st.workers(rank).back() - '0';
        cl.worker(w).Signal(SIGKILL);
        absl::SleepFor(absl::Seconds(1));
        if (absl::Status r = cl.RestartWorker(w); !r.ok()) out.error = r.ToString();
      } else {
        for (pid_t p : fe::TrainerPidsWithJobId(*id)) {
          if (fe::EnvOf(p, "RANK") == std::to_string(rank)) ::kill(p, SIGKILL);
        }
      }
      // The steps the trainers made before the kill that the coordinator
      // hears of only now.
      for (const absl::Time until = killed + absl::Seconds(2); absl::Now() < until;) {
        auto s = cl.GetJob(*id);
        if (!s.ok() || s->generation() != gen_before || fe::IsFinal(s->state())) break;
        step_before = std::max(step_before, s->step());
        absl::SleepFor(absl::Milliseconds(20));
      }
      // The next generation's first aggregated step.
      auto resumed = cl.WaitFor(*id, [&](const v1::JobStatus& s) {
        return fe::IsFinal(s.state()) ||
               (s.generation() > gen_before && s.last().generation() > gen_before);
      }, absl::Seconds(300));
      const double back_s = absl::ToDoubleSeconds(absl::Now() - killed);
      ++failure;
      // The checkpoint the new generation loaded (rank 0's log reaches the
      // coordinator within a second or two).
      std::pair<int, int64_t> r = Resumes(cl, *id);
      for (int i = 0; i < 100 && r.first <= resumes_before; ++i) {
        absl::SleepFor(absl::Milliseconds(100));
        r = Resumes(cl, *id);
      }
      if (resumed.ok() && !fe::IsFinal(resumed->state())) {
        const int64_t resumed_after = r.first > resumes_before ? r.second : 0;
        std::printf(
            "{\"failure\": %d, \"what\": \"%s of rank %d\", \"step_before\": %lld, "
            "\"resumed_after\": %lld, \"steps_lost\": %lld, \"back_training_s\": %.3f}\n",
            failure, worker ? "kill -9 worker" : "kill -9 trainer", rank,
            static_cast<long long>(step_before), static_cast<long long>(resumed_after),
            static_cast<long long>(step_before - resumed_after), back_s);
        std::fflush(stdout);
      }
      next_kill = absl::Now() + absl::Seconds(every_s);
      continue;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  out.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  out.ok = st.state() == v1::SUCCEEDED;
  out.restarts = st.restarts();
  out.steps = st.step();
  out.accuracy = fe::FinalAccuracy(cl, *id);
  if (!out.ok && out.error.empty()) out.error = st.ShortDebugString();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double every_s = 30;
  uint64_t seed = 1;
  int64_t checkpoint_every = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--every-s=", 0) == 0 && absl::SimpleAtod(a.substr(10), &every_s) &&
        every_s >= 5) {
    } else if (a.rfind("--seed=", 0) == 0 && absl::SimpleAtoi(a.substr(7), &seed)) {
    } else if (a.rfind("--checkpoint-every=", 0) == 0 &&
               absl::SimpleAtoi(a.substr(19), &checkpoint_every) && checkpoint_every > 0) {
    } else {
      std::fprintf(stderr,
                   "p8_goodput: bad argument '%s' (--every-s=S>=5 --seed=N "
                   "--checkpoint-every=N>0)\n",
                   a.c_str());
      return 2;
    }
  }
  Run calm = RunJob(every_s, seed, checkpoint_every, /*disturb=*/false);
  if (!calm.ok) {
    std::fprintf(stderr, "p8_goodput: undisturbed run: %s\n", calm.error.c_str());
    return 1;
  }
  Run hit = RunJob(every_s, seed, checkpoint_every, /*disturb=*/true);
  std::printf(
      "{\"summary\": true, \"every_s\": %.1f, \"seed\": %llu, \"checkpoint_every\": %lld, "
      "\"undisturbed_wall_s\": %.2f, \"undisturbed_accuracy\": %.4f, \"steps\": %lld, "
      "\"disturbed_ok\": %s, \"disturbed_wall_s\": %.2f, \"disturbed_accuracy\": %.4f, "
      "\"restarts\": %d, \"goodput\": %.3f, \"error\": \"%s\"}\n",
      every_s, static_cast<unsigned long long>(seed), static_cast<long long>(checkpoint_every),
      calm.wall_s, calm.accuracy, static_cast<long long>(calm.steps),
      hit.ok ? "true" : "false", hit.wall_s, hit.accuracy, hit.restarts,
      hit.wall_s > 0 ? calm.wall_s / hit.wall_s : 0.0, hit.ok ? "" : "disturbed run failed");
  return hit.ok ? 0 : 1;
}
