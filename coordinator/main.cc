// frameworm-coordinator: the cluster's coordinator daemon. Flags are read
// here only; everything else lives in the core (coordinator.h) and the gRPC
// glue (service.h).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"
#include "rpc/rpc.h"

namespace {

constexpr const char* kUsage = R"(usage: frameworm-coordinator [flags]
  --listen=HOST:PORT        address to serve on (default 127.0.0.1:7070)
  --state-dir=DIR           durable state, logs, default checkpoints
                            (default ./frameworm-state)
  --advertise=HOST:PORT     address trainers use to reach this coordinator
                            (default: the listen address)
  --port-range=LO-HI        MASTER_PORT range for jobs (default 29500-29999)
  --heartbeat-timeout=DUR   default worker/rank timeout, e.g. 10s (default 10s)
  --straggler-factor=X      flag ranks slower than X times the median (1.5)
)";

[[noreturn]] void Bad(const std::string& msg) {
  std::fprintf(stderr, "frameworm-coordinator: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {
      {"listen", "127.0.0.1:7070"}, {"state-dir", "./frameworm-state"},
      {"advertise", ""},            {"port-range", "29500-29999"},
      {"heartbeat-timeout", "10s"}, {"straggler-factor", "1.5"}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a.rfind("--", 0) != 0) Bad(absl::StrCat("unexpected argument '", a, "'"));
    std::string name = a.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      Bad(absl::StrCat("flag --", name, " needs a value"));
    }
    if (!flags.count(name)) Bad(absl::StrCat("unknown flag --", name));
    flags[name] = value;
  }

  frameworm::coordinator::CoordinatorOptions o;
  o.state_dir = flags["state-dir"];
  if (o.state_dir.empty()) Bad("--state-dir must not be empty");
  const std::string listen = flags["listen"];
  if (listen.find(':') == std::string::npos)
    Bad(absl::StrCat("--listen must be HOST:PORT, got '", listen, "'"));
  std::vector<std::string> range = absl::StrSplit(flags["port-range"], '-');
  if (range.size() != 2 || !absl::SimpleAtoi(range[0], &o.port_min) ||
      !absl::SimpleAtoi(range[1], &o.port_max) || o.port_min < 1 ||
      o.port_max > 65535 || o.port_min > o.port_max)
    Bad(absl::StrCat("--port-range must be LO-HI within 1-65535, got '",
                     flags["port-range"], "'"));
  absl::Duration timeout;
  if (!absl::ParseDuration(flags["heartbeat-timeout"], &timeout) ||
      timeout <= absl::ZeroDuration())
    Bad(absl::StrCat("--heartbeat-timeout must be a positive duration like "
                     "10s, got '", flags["heartbeat-timeout"], "'"));
  o.default_heartbeat_timeout = timeout;
  if (!absl::SimpleAtod(flags["straggler-factor"], &o.straggler_factor) ||
      o.straggler_factor <= 1.0)
    Bad(absl::StrCat("--straggler-factor must be a number > 1, got '",
                     flags["straggler-factor"], "'"));
  o.advertise = flags["advertise"];

  // SIGINT/SIGTERM are taken by sigwait() below, in every thread.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto core = frameworm::coordinator::Coordinator::Create(
      o, frameworm::RealClock::Real());
  if (!core.ok()) {
    std::fprintf(stderr, "frameworm-coordinator: %s\n",
                 core.status().ToString().c_str());
    return 1;
  }
  frameworm::coordinator::CoordinatorService service(core->get());
  frameworm::ServerOptions so;
  so.listen = listen;
  so.max_message_bytes = 16 << 20;
  auto server = frameworm::StartServer(so, service.services());
  if (!server.ok()) {
    std::fprintf(stderr, "frameworm-coordinator: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  const std::string bound =
      absl::StrCat(listen.substr(0, listen.rfind(':')), ":", server->port);
  if (o.advertise.empty()) (*core)->SetAdvertise(bound);

  absl::Notification stop;
  std::thread ticker([&] {
    while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(100)))
      (*core)->Tick();
  });
  std::printf("frameworm-coordinator listening on %s\n", bound.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "frameworm-coordinator: signal %d, shutting down\n",
               sig);
  stop.Notify();
  ticker.join();
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(1));
  server->server->Wait();
  return 0;
}
