// frameworm-worker: the per-node daemon. Flags and environment are read
// here only; everything else lives in WorkerAgent / Supervisor.
#include <glob.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/process_launcher.h"
#include "worker/worker_agent.h"

extern char** environ;

namespace {

constexpr char kUsage[] =
    "usage: frameworm-worker [--coordinator HOST:PORT] [--name NAME]\n"
    "         [--slots N] [--work-dir DIR] [--advertise HOST]\n"
    "         [--heartbeat-interval SECONDS] [--shutdown-grace SECONDS]\n"
    "  --coordinator  default $FRAMEWORM_COORDINATOR or 127.0.0.1:7070\n"
    "  --name         default <hostname>-<pid>\n"
    "  --slots        default: number of GPUs (/dev/nvidiaN), else 1\n"
    "  --work-dir     trainer logs; default /tmp/frameworm-worker-<name>\n"
    "  --advertise    address trainers use as MASTER_ADDR (default 127.0.0.1)\n";

[[noreturn]] void UsageError(const std::string& msg) {
  std::cerr << "frameworm-worker: " << msg << "\n" << kUsage;
  std::exit(2);
}

int CountGpus() {
  glob_t g;
  int n = 0;
  if (::glob("/dev/nvidia[0-9]*", 0, nullptr, &g) == 0) n = g.gl_pathc;
  ::globfree(&g);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a.rfind("--", 0) != 0) UsageError("unexpected argument '" + a + "'");
    std::string key = a.substr(2), value;
    size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      if (i + 1 >= argc) UsageError("flag --" + key + " needs a value");
      value = argv[++i];
    }
    static const char* kKnown[] = {"coordinator", "name",     "slots",
                                   "work-dir",    "advertise", "heartbeat-interval",
                                   "shutdown-grace"};
    bool known = false;
    for (const char* k : kKnown) known |= key == k;
    if (!known) UsageError("unknown flag --" + key);
    flags[key] = value;
  }

  frameworm::WorkerAgent::Options o;
  const char* env_coord = std::getenv("FRAMEWORM_COORDINATOR");
  o.coordinator = flags.count("coordinator") ? flags["coordinator"]
                  : env_coord && *env_coord  ? env_coord
                                             : "127.0.0.1:7070";
  if (flags.count("name")) {
    o.name = flags["name"];
  } else {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    o.name = absl::StrCat(host, "-", ::getpid());
  }
  if (o.name.empty()) UsageError("--name must not be empty");
  o.slots = CountGpus();
  if (o.slots == 0) o.slots = 1;
  if (flags.count("slots") &&
      (!absl::SimpleAtoi(flags["slots"], &o.slots) || o.slots < 1)) {
    UsageError("--slots must be a positive integer, got '" + flags["slots"] + "'");
  }
  if (flags.count("advertise")) o.advertise = flags["advertise"];
  double secs;
  if (flags.count("heartbeat-interval")) {
    if (!absl::SimpleAtod(flags["heartbeat-interval"], &secs) || secs <= 0) {
      UsageError("--heartbeat-interval must be a positive number of seconds");
    }
    o.heartbeat_interval = absl::Seconds(secs);
  }
  if (flags.count("shutdown-grace")) {
    if (!absl::SimpleAtod(flags["shutdown-grace"], &secs) || secs < 0) {
      UsageError("--shutdown-grace must be a number of seconds >= 0");
    }
    o.shutdown_grace = absl::Seconds(secs);
  }
  o.work_dir = flags.count("work-dir") ? flags["work-dir"]
                                       : "/tmp/frameworm-worker-" + o.name;
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) {
    std::cerr << "frameworm-worker: cannot create --work-dir " << o.work_dir
              << ": " << ec.message() << "\n";
    return 1;
  }
  o.work_dir = std::filesystem::absolute(o.work_dir).string();
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) o.base_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  o.on_event = [](const std::string& line) {
    std::cout << line << std::endl;
  };

  // Signals are taken by one thread with sigwait; every other thread
  // (gRPC's included) inherits the blocked mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto launcher = frameworm::NewPosixProcessLauncher({});
  auto agent = frameworm::WorkerAgent::Create(o, *launcher);
  std::thread([&agent, set] {
    for (;;) {
      int sig = 0;
      if (::sigwait(&set, &sig) != 0) continue;
      if (sig == SIGCHLD) {
        agent->Wake();
      } else {
        agent->Shutdown();
      }
    }
  }).detach();
  std::cout << "frameworm-worker " << o.name << " starting: coordinator "
            << o.coordinator << ", " << o.slots << " slot(s), work dir "
            << o.work_dir << std::endl;
  agent->Run();
  std::cout << "frameworm-worker " << o.name << " stopped" << std::endl;
  std::fflush(stdout);
  std::_Exit(0);  // the signal thread is still parked in sigwait
}
