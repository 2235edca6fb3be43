#include "tests/e2e/hosts.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rpc/cluster_ca.h"
#include "rpc/rpc.h"
#include "tests/e2e/cluster.h"

namespace frameworm::e2e {
namespace {

constexpr char kNamePrefix[] = "fwh";
constexpr char kNftTable[] = "fwh_drop";
constexpr absl::Duration kCommandTimeout = absl::Seconds(10);

std::atomic<bool> g_network_exists{false};

// The absolute path of tool `name` on $PATH or in the usual sbin/bin
// directories; "" if none.
std::string FindTool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    dirs = absl::StrSplit(path, ':', absl::SkipEmpty());
  }
  for (const char* d : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                        "/usr/bin", "/sbin", "/bin"}) {
    dirs.push_back(d);
  }
  for (const auto& d : dirs) {
    std::string p = absl::StrCat(d, "/", name);
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

const std::string& Tool(const std::string& name) {
  static auto* cache = new std::map<std::string, std::string>();
  auto it = cache->find(name);
  if (it == cache->end()) it = cache->emplace(name, FindTool(name)).first;
  return it->second;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Runs a tool (looked up with Tool()); INTERNAL with its output on failure.
absl::StatusOr<std::string> RunTool(const std::string& name,
                                    const std::vector<std::string>& args) {
  const std::string& path = Tool(name);
  if (path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(name, " not found"));
  }
  std::vector<std::string> argv = {path};
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult r = RunCommand(argv, {}, kCommandTimeout);
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed (exit ",
                                            r.exit_code, ", signal ", r.signal,
                                            "): ", r.output));
  }
  return r.output;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

// The pid in a name made by a HostNetwork ("fwh<pid>..."), or 0.
pid_t OwnerOf(const std::string& name) {
  if (!absl::StartsWith(name, kNamePrefix)) return 0;
  size_t i = sizeof(kNamePrefix) - 1, j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  long pid = 0;
  if (j == i || !absl::SimpleAtoi(name.substr(i, j - i), &pid)) return 0;
  return static_cast<pid_t>(pid);
}

bool HasPrefix(const std::string& name, const std::string& prefix) {
  return absl::StartsWith(name, prefix) &&
         (name.size() == prefix.size() ||
          !std::isdigit(static_cast<unsigned char>(name[prefix.size()])));
}

bool ProcessAlive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// Pids whose network namespace is the one bound at `ns_path`.
std::vector<pid_t> PidsInNetns(const std::string& ns_path) {
  std::vector<pid_t> pids;
  struct stat want;
  if (stat(ns_path.c_str(), &want) != 0) return pids;
  for (const std::string& n : ListDir("/proc")) {
    long pid = 0;
    if (!absl::SimpleAtoi(n, &pid) || pid <= 0) continue;
    struct stat st;
    if (stat(absl::StrCat("/proc/", pid, "/ns/net").c_str(), &st) != 0) continue;
    if (st.st_ino == want.st_ino && st.st_dev == want.st_dev) {
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
  return pids;
}

// SIGKILLs every process in the namespace bound at `ns_path` until none is
// left (at most ~10 s). Returns the pids still there.
std::vector<pid_t> EmptyNetns(const std::string& ns_path) {
  std::vector<pid_t> left;
  for (int round = 0; round < 100; ++round) {
    left = PidsInNetns(ns_path);
    if (left.empty()) break;
    for (pid_t p : left) kill(p, SIGKILL);
    absl::SleepFor(absl::Milliseconds(100));
  }
  return left;
}

// Removes namespaces and links of `prefix` (exact owner), or of every dead
// owner when `prefix` is empty.
void RemoveNames(const std::string& prefix) {
  auto ours = [&](const std::string& name) {
    if (!prefix.empty()) return HasPrefix(name, prefix);
    pid_t owner = OwnerOf(name);
    return owner > 0 && owner != getpid() && !ProcessAlive(owner);
  };
  for (const std::string& ns : ListDir("/run/netns")) {
    if (!ours(ns)) continue;
    EmptyNetns(absl::StrCat("/run/netns/", ns));
    (void)RunTool("ip", {"netns", "delete", ns});
  }
  for (const std::string& link : ListDir("/sys/class/net")) {
    if (ours(link)) (void)RunTool("ip", {"link", "delete", link});
  }
}

// True when no route of the root namespace (other than the default route)
// covers or lies inside `cidr`.
absl::StatusOr<bool> SubnetFree(const std::string& cidr) {
  for (const char* how : {"match", "root"}) {
    std::vector<std::string> args = {"-4", "route", "show", "table", "all"};
    if (std::string(how) == "match") {
      args.insert(args.end(), {"to", "match", cidr});
    } else {
      args.insert(args.end(), {"root", cidr});
    }
    auto out = RunTool("ip", args);
    if (!out.ok()) return out.status();
    for (absl::string_view line : absl::StrSplit(*out, '\n', absl::SkipWhitespace())) {
      if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "default")) {
        return false;
      }
    }
  }
  return true;
}

std::string DebianHostsFile(const std::string& hostname) {
  return absl::StrCat(
      "127.0.0.1\tlocalhost\n", "127.0.1.1\t", hostname, "\n\n",
      "# The following lines are desirable for IPv6 capable hosts\n",
      "::1     localhost ip6-localhost ip6-loopback\n", "ff02::1 ip6-allnodes\n",
      "ff02::2 ip6-allrouters\n");
}

}  // namespace

// ------------------------------------------------------------ HostNetwork

absl::Status HostNetwork::CheckPrerequisites() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "multi-host tests make network and mount namespaces and need root "
        "(CAP_NET_ADMIN, CAP_SYS_ADMIN); running as uid ",
        geteuid()));
  }
  for (const char* tool : {"ip", "nsenter", "unshare", "sleep"}) {
    if (Tool(tool).empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "multi-host tests need '", tool,
          "' (Debian packages iproute2, util-linux, coreutils); not found on $PATH "
          "or in /usr/sbin, /sbin"));
    }
  }
  if (access("/proc/self/ns/net", R_OK) != 0 || access("/proc/self/ns/mnt", R_OK) != 0) {
    return absl::FailedPreconditionError(
        "this kernel has no network/mount namespaces (/proc/self/ns/net)");
  }
  return absl::OkStatus();
}

std::string HostNetwork::ProcessPrefix() {
  return absl::StrCat(kNamePrefix, getpid());
}

std::vector<std::string> HostNetwork::Leftovers(const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& ns : ListDir("/run/netns")) {
    if (HasPrefix(ns, prefix)) out.push_back(absl::StrCat("netns ", ns));
  }
  for (const std::string& link : ListDir("/sys/class/net")) {
    if (HasPrefix(link, prefix)) out.push_back(absl::StrCat("link ", link));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HostNetwork>> HostNetwork::Create(
    int hosts, const std::string& log_dir, const std::vector<std::string>& shared) {
  if (absl::Status s = CheckPrerequisites(); !s.ok()) return s;
  if (hosts < 1 || hosts > 200) {
    return absl::InvalidArgumentError(absl::StrCat("hosts must be 1..200, got ", hosts));
  }
  if (shared.size() > 6) {  // the holder's shell passes each as fd 3..8
    return absl::InvalidArgumentError(
        absl::StrCat("at most 6 shared directories, got ", shared.size()));
  }
  bool expected = false;
  if (!g_network_exists.compare_exchange_strong(expected, true)) {
    return absl::FailedPreconditionError(
        "a HostNetwork already exists in this process (one at a time)");
  }
  std::unique_ptr<HostNetwork> net(new HostNetwork());
  net->claimed_ = true;
  net->prefix_ = ProcessPrefix();
  net->log_dir_ = log_dir;
  net->shared_ = shared;
  RemoveNames(net->prefix_);  // this pid's leftovers
  RemoveNames("");            // dead runs' leftovers
  if (absl::Status s = net->Build(hosts); !s.ok()) return s;  // ~ cleans up
  return net;
}

absl::Status HostNetwork::Build(int hosts) {
  // A /24 of 10.213.0.0/16 that nothing on this machine routes yet.
  const int start = static_cast<int>(getpid() % 224);
  for (int attempt = 0; attempt < 224 && subnet_.empty(); ++attempt) {
    const int k = 16 + (start + attempt) % 224;
    std::string cidr = absl::StrCat("10.213.", k, ".0/24");
    auto free = SubnetFree(cidr);
    if (!free.ok()) return free.status();
    if (*free) {
      subnet_ = cidr;
      subnet_base_ = absl::StrCat("10.213.", k, ".");
    }
  }
  if (subnet_.empty()) {
    return absl::FailedPreconditionError("every 10.213.K.0/24 (K 16..239) is routed here");
  }
  bridge_ = absl::StrCat(prefix_, "br");
  root_address_ = absl::StrCat(subnet_base_, 254);
  auto ip = [](std::vector<std::string> args) { return RunTool("ip", args).status(); };
  if (absl::Status s = ip({"link", "add", bridge_, "type", "bridge"}); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a Linux bridge (kernel module 'bridge'?): ",
                     s.message()));
  }
  if (auto s = ip({"link", "set", bridge_, "up"}); !s.ok()) return s;
  if (auto s = ip({"addr", "add", root_address_ + "/24", "dev", bridge_}); !s.ok()) return s;
  // A run that picked the same subnet at the same moment: give up rather
  // than share a route.
  auto routes = RunTool("ip", {"-4", "route", "show", "root", subnet_});
  if (!routes.ok()) return routes.status();
  for (absl::string_view line : absl::StrSplit(*routes, '\n', absl::SkipWhitespace())) {
    if (!absl::StrContains(line, bridge_)) {
      return absl::UnavailableError(
          absl::StrCat(subnet_, " was taken meanwhile: ", line, "; run again"));
    }
  }

  for (int i = 0; i < hosts; ++i) {
    Host h;
    h.index = i;
    h.netns = absl::StrCat(prefix_, "h", i);
    h.hostname = absl::StrCat("host", i);
    h.address = absl::StrCat(subnet_base_, i + 1);
    h.veth = absl::StrCat(prefix_, "v", i);
    hosts_.push_back(h);
    if (absl::Status s = ip({"netns", "add", h.netns}); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create a network namespace: ", s.message()));
    }
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns},
             {"link", "set", h.veth, "master", bridge_},
             {"link", "set", h.veth, "up"},
             {"-n", h.netns, "addr", "add", h.address + "/24", "dev", "eth0"},
             {"-n", h.netns, "link", "set", "eth0", "up"},
             {"-n", h.netns, "link", "set", "lo", "up"}}) {
      if (absl::Status s = ip(args); !s.ok()) return s;
    }

    // The holder: private /tmp, /dev/shm, hostname, Debian's /etc/hosts.
    // A shared directory is opened before /tmp is covered and bound back
    // from that descriptor (a bind from another mount namespace's path is
    // refused by the kernel; the descriptor is in this one).
    const std::string hosts_file = absl::StrCat(log_dir_, "/", h.hostname, ".hosts");
    std::ofstream(hosts_file) << DebianHostsFile(h.hostname);
    std::string open_shared, bind_shared;
    for (size_t k = 0; k < shared_.size(); ++k) {
      const std::string dir = ShellQuote(shared_[k]);
      const size_t fd = 3 + k;
      absl::StrAppend(&open_shared, "exec ", fd, "<", dir, "\n");
      absl::StrAppend(&bind_shared, "mkdir -p ", dir, "\n",
                      "mount --no-canonicalize --bind /proc/self/fd/", fd, " ", dir, "\n",
                      "exec ", fd, "<&-\n");
    }
    const std::string script = absl::StrCat(
        "set -e\n", open_shared,
        "mount --bind ", ShellQuote(hosts_file), " /etc/hosts\n",
        "mount -t tmpfs -o mode=1777 fwh-tmp /tmp\n",
        "mount -t tmpfs -o mode=1777 fwh-shm /dev/shm\n", bind_shared,
        "hostname ", ShellQuote(h.hostname), "\n",
        "echo ready\n",
        "exec ", ShellQuote(Tool("sleep")), " infinity\n");
    auto holder = ChildProcess::Start(
        {Tool("ip"), "netns", "exec", h.netns, Tool("unshare"), "--mount", "--uts",
         "--propagation", "private", "--", "/bin/sh", "-c", script},
        {}, absl::StrCat(log_dir_, "/", h.hostname, "-holder.log"));
    if (!holder.ok()) return holder.status();
    holders_.push_back(std::move(*holder));
    auto ready = holders_.back()->WaitForLine("ready", absl::Seconds(10));
    if (!ready.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot make host ", i, "'s mount/UTS namespaces: ", ready.status().message()));
    }
    hosts_.back().holder = holders_.back()->pid();
    struct stat want, got;
    if (stat(absl::StrCat("/run/netns/", h.netns).c_str(), &want) != 0 ||
        stat(absl::StrCat("/proc/", hosts_.back().holder, "/ns/net").c_str(), &got) != 0 ||
        want.st_ino != got.st_ino) {
      return absl::InternalError(absl::StrCat("host ", i, "'s holder (pid ",
                                              hosts_.back().holder,
                                              ") is not in network namespace ", h.netns));
    }
  }
  return absl::OkStatus();
}

HostNetwork::~HostNetwork() {
  for (int i = 0; i < size(); ++i) KillHostProcesses(i);
  holders_.clear();  // reaps them
  for (const Host& h : hosts_) (void)RunTool("ip", {"link", "delete", h.veth});
  if (!bridge_.empty()) (void)RunTool("ip", {"link", "delete", bridge_});
  for (const Host& h : hosts_) (void)RunTool("ip", {"netns", "delete", h.netns});
  // Veths of a deleted namespace go away asynchronously.
  std::vector<std::string> left;
  for (int round = 0; round < 100; ++round) {
    left = Leftovers(prefix_);
    if (left.empty()) break;
    if (round % 20 == 19) RemoveNames(prefix_);
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!left.empty()) {
    std::fprintf(stderr, "HostNetwork: could not remove %s\n",
                 absl::StrJoin(left, ", ").c_str());
  }
  if (claimed_) g_network_exists = false;
}

void HostNetwork::KillHostProcesses(int i) {
  std::vector<pid_t> left = EmptyNetns(absl::StrCat("/run/netns/", hosts_[i].netns));
  if (!left.empty()) {
    std::fprintf(stderr, "HostNetwork: processes %s of %s survived SIGKILL\n",
                 absl::StrJoin(left, " ").c_str(), hosts_[i].netns.c_str());
  }
}

std::vector<std::string> HostNetwork::OnHost(int i, const std::vector<std::string>& argv,
                                             const std::string& wd) const {
  std::vector<std::string> out = {Tool("nsenter"),
                                  absl::StrCat("--target=", hosts_.at(i).holder),
                                  "--net",
                                  "--mount",
                                  "--uts",
                                  absl::StrCat("--wdns=", wd),
                                  "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> HostNetwork::Start(
    int i, const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env, const std::string& log_path,
    const std::string& wd) const {
  std::map<std::string, std::string> e = env;
  e.emplace("TMPDIR", "/tmp");
  return ChildProcess::Start(OnHost(i, argv, wd), e, log_path);
}

RunResult HostNetwork::Run(int i, const std::vector<std::string>& argv,
                           absl::Duration timeout) const {
  return RunCommand(OnHost(i, argv), {{"TMPDIR", "/tmp"}}, timeout);
}

std::string HostNetwork::PathOnHost(int i, const std::string& path) const {
  return absl::StrCat("/proc/", hosts_.at(i).holder, "/root", path);
}

std::vector<pid_t> HostNetwork::Pids(int i) const {
  return PidsInNetns(absl::StrCat("/run/netns/", hosts_.at(i).netns));
}

absl::Status HostNetwork::LinkDown(int i) {
  return RunTool("ip", {"link", "set", hosts_.at(i).veth, "down"}).status();
}

absl::Status HostNetwork::LinkUp(int i) {
  return RunTool("ip", {"link", "set", hosts_.at(i).veth, "up"}).status();
}

absl::Status HostNetwork::DropAll(int i) {
  if (Tool("nft").empty()) {
    return absl::FailedPreconditionError(
        "nft not found: install the Debian package nftables");
  }
  const std::string file = absl::StrCat(log_dir_, "/", kNftTable, ".nft");
  std::ofstream(file) << "table inet " << kNftTable << " {\n"
                      << "  chain input { type filter hook input priority -300; "
                         "policy drop; iif \"lo\" accept; }\n"
                      << "  chain output { type filter hook output priority -300; "
                         "policy drop; oif \"lo\" accept; }\n"
                      << "}\n";
  return RunTool("ip", {"netns", "exec", hosts_.at(i).netns, Tool("nft"), "-f", file})
      .status();
}

absl::Status HostNetwork::AllowAll(int i) {
  if (Tool("nft").empty()) {
    return absl::FailedPreconditionError(
        "nft not found: install the Debian package nftables");
  }
  return RunTool("ip", {"netns", "exec", hosts_.at(i).netns, Tool("nft"), "delete",
                        "table", "inet", kNftTable})
      .status();
}

absl::StatusOr<int> HostNetwork::SocketIn(int i) const {
  const std::string path = absl::StrCat("/run/netns/", hosts_.at(i).netns);
  int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  int fd = -1, err = 0;
  // setns(CLONE_NEWNET) changes the calling thread only: a short-lived
  // thread makes the socket, which stays in that namespace.
  std::thread([&] {
    if (setns(ns, CLONE_NEWNET) != 0) {
      err = errno;
      return;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) err = errno;
  }).join();
  close(ns);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket in ", path, ": ", strerror(err)));
  }
  return fd;
}

absl::StatusOr<int> HostNetwork::TcpListen(int i, int port) const {
  auto fd = SocketIn(i);
  if (!fd.ok()) return fd.status();
  int one = 1;
  setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, hosts_.at(i).address.c_str(), &a.sin_addr);
  if (bind(*fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(*fd, 16) != 0) {
    int e = errno;
    close(*fd);
    return absl::InternalError(absl::StrCat("listen on ", hosts_.at(i).address, ":", port,
                                            ": ", strerror(e)));
  }
  return *fd;
}

absl::Status HostNetwork::TcpConnect(int from, const std::string& address, int port,
                                     absl::Duration timeout) const {
  auto fd = SocketIn(from);
  if (!fd.ok()) return fd.status();
  const std::string what = absl::StrCat(hosts_.at(from).hostname, " -> ", address, ":", port);
  fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) | O_NONBLOCK);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    close(*fd);
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", address));
  }
  absl::Status result = absl::OkStatus();
  if (connect(*fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (errno != EINPROGRESS) {
      result = absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
    } else {
      pollfd p{*fd, POLLOUT, 0};
      int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
      int n = poll(&p, 1, ms);
      int err = 0;
      socklen_t len = sizeof(err);
      if (n == 0) {
        result = absl::DeadlineExceededError(
            absl::StrCat(what, ": no connection within ", absl::FormatDuration(timeout)));
      } else if (n < 0 || getsockopt(*fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
                 err != 0) {
        result = absl::UnavailableError(
            absl::StrCat(what, ": ", strerror(n < 0 ? errno : err)));
      }
    }
  }
  close(*fd);
  return result;
}

// ------------------------------------------------------- MultiHostCluster

absl::StatusOr<std::unique_ptr<MultiHostCluster>> MultiHostCluster::Start(
    const MultiHostOptions& o) {
  if (absl::Status s = HostNetwork::CheckPrerequisites(); !s.ok()) return s;
  std::unique_ptr<MultiHostCluster> c(new MultiHostCluster());
  std::vector<std::string> shared;  // /tmp directories the hosts must see
  c->options_ = o;
  for (const char* name : {"frameworm-coordinator", "frameworm-worker", "frameworm-cli",
                           "frameworm-train"}) {
    std::string path = Cluster::Bin(name);
    char real[PATH_MAX];
    if (realpath(path.c_str(), real) == nullptr || access(real, X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no executable ", path, " (set FRAMEWORM_BIN_DIR to a build's bin directory)"));
    }
    path = real;
    // A checkout under /tmp (mktemp -d): its top directory there (build,
    // .venv and all) stays visible on every host.
    for (const char* root : {"/tmp/", "/dev/shm/"}) {
      if (!absl::StartsWith(path, root)) continue;
      const size_t end = path.find('/', strlen(root));
      const std::string top = path.substr(0, end);
      if (std::find(shared.begin(), shared.end(), top) == shared.end()) shared.push_back(top);
    }
    c->bins_[name] = path;
  }
  c->dir_ = MakeTempDir("fw-mh");
  if (c->dir_.empty()) return absl::InternalError("mkdtemp failed");
  auto net = HostNetwork::Create(o.workers + 1, c->dir_, shared);
  if (!net.ok()) return net.status();
  c->net_ = std::move(*net);

  // The cluster's certificates: each host's on its own /tmp.
  const std::string ca = absl::StrCat(c->dir_, "/ca");
  if (absl::Status s = InitClusterCa(ca); !s.ok()) return s;
  c->admin_tls_ = absl::StrCat(c->dir_, "/admin-tls");
  if (absl::Status s = IssueCertificate(ca, "admin", "test", c->admin_tls_); !s.ok()) return s;
  auto admin = LoadTlsDir(c->admin_tls_);
  if (!admin.ok()) return admin.status();
  c->admin_files_ = *admin;
  for (int h = 0; h <= o.workers; ++h) {
    const std::string on_host = c->net_->PathOnHost(h, kTlsDir);
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(on_host).parent_path(), ec);
    absl::Status s = h == 0 ? IssueCertificate(ca, "coordinator", "coordinator", on_host)
                            : IssueCertificate(ca, "worker", c->net_->host(h).hostname, on_host);
    if (!s.ok()) return s;
  }
  const std::string listen =
      absl::StrCat(c->net_->host(0).address, ":", kCoordinatorPort);
  std::vector<std::string> argv = {c->Bin("frameworm-coordinator"),
                                   absl::StrCat("--listen=", o.derive_addresses
                                                                 ? absl::StrCat("0.0.0.0:", kCoordinatorPort)
                                                                 : listen),
                                   absl::StrCat("--state-dir=", kStateDir),
                                   absl::StrCat("--tls-dir=", kTlsDir)};
  for (const auto& f : o.coordinator_flags) argv.push_back(f);
  auto child = c->net_->Start(0, argv, {}, absl::StrCat(c->dir_, "/coordinator.log"), "/tmp");
  if (!child.ok()) return child.status();
  c->coordinator_ = std::move(*child);
  auto line = c->coordinator_->WaitForLine("listening on ", absl::Seconds(30));
  if (!line.ok()) return line.status();
  c->address_ = listen;
  // The test's own path to the coordinator (root namespace -> bridge ->
  // host 0) works before anything depends on it.
  auto channel = MakeChannel(c->address_, &c->admin_files_);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    return absl::UnavailableError(absl::StrCat(
        "the test process cannot reach the coordinator at ", c->address_,
        " over the bridge from ", c->net_->root_address()));
  }
  c->stub_ = v1::JobService::NewStub(channel);
  const int started = o.started_workers < 0 ? o.workers : std::min(o.started_workers, o.workers);
  for (int h = 1; h <= started; ++h) {
    if (absl::Status s = c->StartWorker(h); !s.ok()) return s;
  }
  return c;
}

std::string MultiHostCluster::WorkerName(int host) const {
  return net_->host(host).hostname;
}

int MultiHostCluster::HostOf(const std::string& name) const {
  for (int h = 1; h <= options_.workers; ++h) {
    if (WorkerName(h) == name) return h;
  }
  return -1;
}

absl::Status MultiHostCluster::StartWorker(int host) {
  if (host < 1 || host > options_.workers) {
    return absl::InvalidArgumentError(absl::StrCat("no worker host ", host));
  }
  const Host& h = net_->host(host);
  std::vector<std::string> argv = {
      Bin("frameworm-worker"),
      absl::StrCat("--coordinator=", address_),
      absl::StrCat("--name=", h.hostname),
      absl::StrCat("--tls-dir=", kTlsDir),
      absl::StrCat("--slots=", options_.slots_per_worker),
      absl::StrCat("--work-dir=", kWorkDir),
      absl::StrCat("--heartbeat-interval=", options_.heartbeat_interval_s)};
  if (!options_.derive_addresses) argv.push_back(absl::StrCat("--advertise=", h.address));
  const std::string log =
      absl::StrCat(dir_, "/", h.hostname, "-worker-", worker_starts_[host]++, ".log");
  auto child = net_->Start(host, argv, {}, log, "/tmp");
  if (!child.ok()) return child.status();
  auto line = (*child)->WaitForLine("registered", absl::Seconds(30));
  if (!line.ok()) {
    return absl::Status(line.status().code(),
                        absl::StrCat("worker on ", h.hostname, ": ", line.status().message()));
  }
  workers_[host] = std::move(*child);
  return absl::OkStatus();
}

absl::Status MultiHostCluster::KillWorker(int host) {
  auto it = workers_.find(host);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("no worker on host ", host));
  }
  if (kill(it->second->pid(), SIGKILL) != 0) {
    return absl::InternalError(absl::StrCat("kill ", it->second->pid(), ": ", strerror(errno)));
  }
  if (!it->second->Wait(absl::Seconds(10))) {
    return absl::DeadlineExceededError("the killed worker was not reaped within 10s");
  }
  return absl::OkStatus();
}

RunResult MultiHostCluster::Cli(const std::vector<std::string>& args,
                                absl::Duration timeout) {
  std::vector<std::string> argv = {Bin("frameworm-cli"),
                                   absl::StrCat("--coordinator=", address_),
                                   absl::StrCat("--tls-dir=", admin_tls_)};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {}, timeout);
}

absl::StatusOr<std::string> MultiHostCluster::Submit(const std::string& yaml) {
  std::string path = absl::StrCat(dir_, "/job-", job_ids_.size(), ".yaml");
  std::ofstream(path) << yaml;
  // The CLI gives up on a TCP handshake slower than its channel's minimum
  // connect timeout (rpc/rpc.cc); such a call never reached the
  // coordinator, so it is safe to repeat (at most 3 tries).
  RunResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) absl::SleepFor(absl::Milliseconds(500));
    r = Cli({"submit", path});
    if (r.exit_code == 0 || !absl::StrContains(r.output, "failed to connect")) break;
  }
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("submit failed (", r.exit_code, "): ", r.output));
  }
  std::string id(absl::StripAsciiWhitespace(r.output));
  if (size_t nl = id.rfind('\n'); nl != std::string::npos) id = id.substr(nl + 1);
  job_ids_.push_back(id);
  return id;
}

absl::StatusOr<v1::JobStatus> MultiHostCluster::GetJob(const std::string& job_id) {
  return GetJobStatus(*stub_, job_id);
}

absl::StatusOr<v1::JobStatus> MultiHostCluster::WaitFor(
    const std::string& job_id, const std::function<bool(const v1::JobStatus&)>& done,
    absl::Duration timeout) {
  return WaitForJob(*stub_, job_id, done, timeout);
}

absl::StatusOr<v1::JobStatus> MultiHostCluster::WaitForFinal(const std::string& job_id,
                                                             absl::Duration timeout) {
  return WaitFor(job_id, [](const v1::JobStatus& s) { return IsFinal(s.state()); },
                 timeout);
}

namespace {
template <typename Resp, typename Req, typename Call>
absl::StatusOr<Resp> Unary(Call call, const Req& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  Resp resp;
  grpc::Status s = call(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  return resp;
}
}  // namespace

absl::StatusOr<std::vector<v1::WorkerInfo>> MultiHostCluster::ListWorkers() {
  auto r = Unary<v1::ListWorkersResponse>(
      [&](auto* ctx, const auto& req, auto* resp) {
        return stub_->ListWorkers(ctx, req, resp);
      },
      v1::ListWorkersRequest());
  if (!r.ok()) return r.status();
  return std::vector<v1::WorkerInfo>(r->workers().begin(), r->workers().end());
}

absl::StatusOr<std::vector<v1::AggregatedStep>> MultiHostCluster::Metrics(
    const std::string& job_id) {
  v1::GetMetricsRequest req;
  req.set_job_id(job_id);
  auto r = Unary<v1::GetMetricsResponse>(
      [&](auto* ctx, const auto& q, auto* resp) { return stub_->GetMetrics(ctx, q, resp); },
      req);
  if (!r.ok()) return r.status();
  return std::vector<v1::AggregatedStep>(r->steps().begin(), r->steps().end());
}

absl::StatusOr<std::vector<v1::CheckpointRecord>> MultiHostCluster::Checkpoints(
    const std::string& job_id) {
  v1::ListCheckpointsRequest req;
  req.set_job_id(job_id);
  auto r = Unary<v1::ListCheckpointsResponse>(
      [&](auto* ctx, const auto& q, auto* resp) {
        return stub_->ListCheckpoints(ctx, q, resp);
      },
      req);
  if (!r.ok()) return r.status();
  return std::vector<v1::CheckpointRecord>(r->checkpoints().begin(),
                                           r->checkpoints().end());
}

MultiHostCluster::~MultiHostCluster() {
  const bool keep = std::getenv("FRAMEWORM_KEEP_TEST_DIRS") != nullptr;
  if (keep && net_) {
    for (int i = 0; i < net_->size(); ++i) {
      RunCommand({"/bin/cp", "-a", net_->PathOnHost(i, "/tmp/frameworm"),
                  absl::StrCat(dir_, "/", net_->host(i).hostname, "-tmp")},
                 {}, absl::Seconds(30));
    }
  }
  for (auto& [host, w] : workers_) {
    w->Signal(SIGCONT);
    w->Signal(SIGKILL);
    w->Wait(absl::Seconds(10));
  }
  if (coordinator_) {
    coordinator_->Signal(SIGKILL);
    coordinator_->Wait(absl::Seconds(10));
  }
  for (const auto& id : job_ids_) {
    for (pid_t p : PidsWithJobId(id)) kill(p, SIGKILL);
  }
  net_.reset();  // every process left on the hosts, then the hosts
  if (!keep && !dir_.empty()) {
    RunCommand({"/bin/rm", "-rf", dir_}, {}, absl::Seconds(30));
  } else if (keep) {
    std::fprintf(stderr, "MultiHostCluster: logs kept in %s\n", dir_.c_str());
  }
}

}  // namespace frameworm::e2e
