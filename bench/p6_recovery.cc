// P6: recovery from kill -9 of a worker. A real cluster on 127.0.0.1
// (coordinator + 3 workers, the e2e harness), a 2-node CNN job on
// Fashion-MNIST; once a checkpoint exists, the worker holding node rank 1
// is killed with SIGKILL. Measured per trial:
//   detection: kill -> the coordinator has started a new generation
//   resume:    kill -> the first step of the new generation is aggregated
// Prints one JSON line per trial; bench/p6_recovery.sh makes the report.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "tests/e2e/cluster.h"

using frameworm::e2e::Cluster;
using frameworm::e2e::ClusterOptions;
using frameworm::e2e::IsFinal;

int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 3;
  const double hb_timeout = argc > 2 ? std::atof(argv[2]) : 2.0;
  for (int t = 0; t < trials; ++t) {
    ClusterOptions o;
    o.workers = 3;
    auto c = Cluster::Start(o);
    if (!c.ok()) {
      std::fprintf(stderr, "p6: %s\n", c.status().ToString().c_str());
      return 1;
    }
    std::string yaml = absl::StrCat(
        "name: p6\nnodes: 2\nnproc_per_node: 1\nbackend: gloo\nmax_restarts: 1\n",
        "heartbeat_timeout: ", hb_timeout,
        "\ntrain:\n  model: cnn\n  dataset: fashion-mnist\n  max_steps: 100000\n"
        "  batch_size: 64\ncheckpoint:\n  every_n_steps: 10\n  keep_last: 2\n");
    auto id = (*c)->Submit(yaml);
    if (!id.ok()) {
      std::fprintf(stderr, "p6: %s\n", id.status().ToString().c_str());
      return 1;
    }
    auto ready = (*c)->WaitFor(*id, [](const frameworm::v1::JobStatus& s) {
      return s.step() >= 15 || IsFinal(s.state());
    }, absl::Seconds(120));
    if (!ready.ok() || IsFinal(ready->state())) {
      std::fprintf(stderr, "p6: job did not reach step 15\n");
      return 1;
    }
    std::string victim = ready->workers(1);
    absl::Time killed = absl::Now();
    (*c)->worker(victim.back() - '0').Signal(SIGKILL);
    auto detected = (*c)->WaitFor(*id, [](const frameworm::v1::JobStatus& s) {
      return s.generation() >= 2 || IsFinal(s.state());
    }, absl::Seconds(60));
    absl::Time detected_at = absl::Now();
    auto resumed = (*c)->WaitFor(*id, [](const frameworm::v1::JobStatus& s) {
      return (s.generation() >= 2 && s.last().generation() >= 2) || IsFinal(s.state());
    }, absl::Seconds(120));
    absl::Time resumed_at = absl::Now();
    if (!detected.ok() || !resumed.ok() || IsFinal(resumed->state())) {
      std::fprintf(stderr, "p6: no recovery: %s\n",
                   resumed.ok() ? resumed->ShortDebugString().c_str()
                                : resumed.status().ToString().c_str());
      return 1;
    }
    std::printf("{\"trial\":%d,\"heartbeat_timeout_s\":%.1f,\"detection_s\":%.3f,"
                "\"resume_s\":%.3f,\"resumed_at_step\":%lld}\n",
                t, hb_timeout, absl::ToDoubleSeconds(detected_at - killed),
                absl::ToDoubleSeconds(resumed_at - killed),
                static_cast<long long>(resumed->last().step()));
    std::fflush(stdout);
    (*c)->Cli({"cancel", *id});
  }
  return 0;
}
