// P9: checkpoint copy throughput between two hosts against the link's own
// bandwidth, measured in the same run on the multi-host harness
// (tests/e2e/hosts.h: the coordinator on host 0, a worker on host 1, a veth
// pair and a bridge between them, mutual TLS).
//
//   link:   a plain TCP stream of N MiB from host 1 to host 0 (this binary
//           in --send / --receive mode): what the veth path carries.
//   upload: a job on host 1 whose entrypoint is this binary in --upload
//           mode: it writes an N MiB file and sends it the way rank 0 sends
//           a checkpoint (TrainerChannel::UploadCheckpoint: 1 MiB chunks,
//           CRC-32, TLS; the coordinator writes, fsyncs and renames it).
//
//   peer:   worker to worker (host 1 serves, host 2 fetches) the way a
//           replica is copied: PeerService.FetchCheckpoint over mutual TLS
//           with the hosts' worker certificates, 1 MiB chunks, CRC-32, the
//           fetcher writes, fsyncs and renames (FetchCheckpointFrom); against
//           a plain TCP stream from host 1 to host 2 (peer_link).
//   ceilings for the peer copy, on the same hosts (bench/p9_tls_stream.h):
//           peer_tls, a bare mutual-TLS stream host 1 -> host 2 (what any
//           encrypted copy at best gets from these cores), and disk, host
//           2 writing and fsyncing the same size where the fetch writes.
//
// Prints one JSON line per trial ({"trial":i,"link_mib_s":..,"upload_mib_s":..})
// and a summary line with the medians and their ratio. Needs root.
//   p9_copy [TRIALS] [MIB]
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/p9_tls_stream.h"
#include "common/rank_env.h"
#include "tests/e2e/hosts.h"
#include "trainer/trainer_channel.h"
#include "common/received_file.h"
#include "common/token.h"
#include "rpc/rpc.h"
#include "worker/checkpoint_holdings.h"
#include "worker/peer_service.h"

namespace {

using frameworm::e2e::MultiHostCluster;
using frameworm::e2e::MultiHostOptions;

constexpr int kLinkPort = 7171;
constexpr size_t kBuf = 1 << 20;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// --receive: accepts one connection, reads to EOF, prints the bytes.
int Receive() {
  const int s = frameworm::bench::ListenTcp(kLinkPort, "p9 receive");
  if (s < 0) return 1;
  std::printf("receiving on %d\n", kLinkPort);
  std::fflush(stdout);
  const int c = ::accept(s, nullptr, nullptr);
  std::vector<char> buf(kBuf);
  long long total = 0;
  for (ssize_t n; (n = ::read(c, buf.data(), buf.size())) > 0;) total += n;
  ::close(c);
  ::close(s);
  std::printf("received %lld\n", total);
  return 0;
}

// --send HOST MIB: connects, writes MIB MiB, prints MiB/s (until the
// receiver closed, so the bytes arrived).
int Send(const std::string& host, long long mib) {
  const int s = frameworm::bench::ConnectTcp(host, kLinkPort, "p9 send");
  if (s < 0) return 1;
  std::vector<char> buf(kBuf, 'x');
  const absl::Time t0 = absl::Now();
  for (long long i = 0; i < mib; ++i) {
    size_t done = 0;
    while (done < buf.size()) {
      const ssize_t n = ::write(s, buf.data() + done, buf.size() - done);
      if (n <= 0) return 1;
      done += static_cast<size_t>(n);
    }
  }
  ::shutdown(s, SHUT_WR);
  char c;
  while (::read(s, &c, 1) > 0) {
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  ::close(s);
  std::printf("{\"link_mib_s\":%.1f}\n", static_cast<double>(mib) / secs);
  return 0;
}

// --upload MIB: a job's rank 0 sending a checkpoint of MIB MiB.
int Upload(long long mib) {
  auto env = frameworm::ParseRankEnv(frameworm::ProcessEnvLookup());
  if (!env.ok()) {
    std::fprintf(stderr, "p9 upload: %s\n", env.status().ToString().c_str());
    return 1;
  }
  frameworm::TrainerChannelOptions o;
  o.coordinator = env->coordinator;
  o.job_id = env->job_id;
  o.generation = env->generation;
  o.rank = env->rank;
  o.token = env->token;
  o.tls_dir = env->tls_dir;
  o.connect_timeout = absl::Seconds(15);
  auto channel = frameworm::NewTrainerChannel(o);
  if (!channel.ok()) {
    std::fprintf(stderr, "p9 upload: %s\n", channel.status().ToString().c_str());
    return 1;
  }
  const std::string path = "/tmp/p9-ckpt-1.pt";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    std::vector<char> buf(kBuf);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 7919);
    for (long long i = 0; i < mib; ++i) out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  ::sync();
  const absl::Time t0 = absl::Now();
  absl::Status s = (*channel)->UploadCheckpoint(1, path);
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  ::unlink(path.c_str());
  if (!s.ok()) {
    std::fprintf(stderr, "p9 upload: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("{\"upload_mib_s\":%.1f}\n", static_cast<double>(mib) / secs);
  return 0;
}

constexpr int kPeerPort = 7172;
constexpr int kTlsPort = 7173;

// --serve MIB: as a worker on this host (its TLS directory), holds an MIB
// MiB checkpoint file and serves it until killed.
int Serve(long long mib) {
  const std::string path = "/tmp/p9-src/ckpt-1.pt";
  std::filesystem::create_directories("/tmp/p9-src");
  std::string buf(kBuf, '\0');
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 7919);
  uint32_t crc = 0;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (long long i = 0; i < mib; ++i) {
      out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
      crc = frameworm::UpdateCrc32(crc, buf);
    }
  }
  ::sync();
  frameworm::CheckpointHoldings held;
  frameworm::HeldCheckpoint h;
  h.job_id = "p9";
  h.step = 1;
  h.path = path;
  h.bytes = mib << 20;
  h.checksum = frameworm::Crc32Text(crc);
  h.secret = frameworm::NewToken();  // a fetcher must present it, as a replica's hold does
  if (!held.Add(h).ok()) return 1;
  auto tls = frameworm::LoadTlsDir(frameworm::e2e::kTlsDir);
  if (!tls.ok()) {
    std::fprintf(stderr, "p9 serve: %s\n", tls.status().ToString().c_str());
    return 1;
  }
  frameworm::PeerServiceImpl service(held);
  frameworm::ServerOptions o;
  o.listen = absl::StrCat("0.0.0.0:", kPeerPort);
  o.tls = *tls;
  auto server = frameworm::StartServer(o, {&service});
  if (!server.ok()) {
    std::fprintf(stderr, "p9 serve: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("serving %s %s\n", h.checksum.c_str(), h.secret.c_str());
  std::fflush(stdout);
  server->server->Wait();
  return 0;
}

// --fetch HOST MIB CHECKSUM: fetches the served file as a replica would
// (with the hold's secret from P9_SECRET), prints MiB/s (fetch, write,
// fsync and rename included).
int Fetch(const std::string& host, long long mib, const std::string& checksum) {
  auto tls = frameworm::LoadTlsDir(frameworm::e2e::kTlsDir);
  if (!tls.ok()) {
    std::fprintf(stderr, "p9 fetch: %s\n", tls.status().ToString().c_str());
    return 1;
  }
  frameworm::HeldCheckpoint h;
  h.job_id = "p9";
  h.step = 1;
  // P9_FETCH_DIR: where the copy goes (default /tmp/p9-dst; /dev/shm/...
  // takes the disk out of the measurement).
  const char* dst = std::getenv("P9_FETCH_DIR");
  h.path = absl::StrCat(dst != nullptr && *dst == '/' ? dst : "/tmp/p9-dst", "/ckpt-1.pt");
  h.bytes = mib << 20;
  h.checksum = checksum;
  h.secret = std::getenv("P9_SECRET") != nullptr ? std::getenv("P9_SECRET") : "";
  h.sources = {absl::StrCat(host, ":", kPeerPort)};
  std::filesystem::remove(h.path);
  std::atomic<bool> stop{false};
  const absl::Time t0 = absl::Now();
  // P9_STREAMS: how many streams at once (default: FetchCheckpointFrom's choice).
  int streams = 0;
  if (const char* n = std::getenv("P9_STREAMS"); n != nullptr && !absl::SimpleAtoi(n, &streams)) {
    streams = 0;
  }
  absl::Status s =
      frameworm::FetchCheckpointFrom(h, &*tls, absl::Minutes(5), stop, nullptr, streams);
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  std::filesystem::remove(h.path);
  if (!s.ok()) {
    std::fprintf(stderr, "p9 fetch: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("{\"peer_mib_s\":%.1f}\n", static_cast<double>(mib) / secs);
  return 0;
}

// The number after `key` in `text` ("...\"key\":123.4..."), or -1.
double Field(const std::string& text, const std::string& key) {
  const size_t at = text.rfind(absl::StrCat("\"", key, "\":"));
  if (at == std::string::npos) return -1;
  double v = -1;
  std::string tail = text.substr(at + key.size() + 3);
  tail = tail.substr(0, tail.find_first_of(",}"));
  return absl::SimpleAtod(tail, &v) ? v : -1;
}

std::string Self() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

int Bench(int trials, long long mib) {
  MultiHostOptions o;
  o.workers = 2;
  auto cluster = MultiHostCluster::Start(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "p9: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  MultiHostCluster& c = **cluster;
  const std::string self = Self();
  std::vector<double> link, upload, peer_link, peer, peer_tls, disk;
  // A stream of `mib` MiB from host `from` to host `to` (`mode` is
  // "" for plain TCP, "tls-" for TLS): the sender's output, or nullopt
  // when the receiver did not start.
  auto stream = [&](int from, int to, const std::string& mode,
                    const std::string& log) -> std::optional<frameworm::e2e::RunResult> {
    auto receiver = c.net().Start(to, {self, "--" + mode + "receive"}, {},
                                  absl::StrCat(c.dir(), "/", log), "/tmp");
    if (!receiver.ok() || !(*receiver)->WaitForLine("receiving", absl::Seconds(10)).ok()) {
      std::fprintf(stderr, "p9: the %sreceiver on host %d did not start\n", mode.c_str(), to);
      return std::nullopt;
    }
    frameworm::e2e::RunResult sent = frameworm::e2e::RunCommand(
        c.net().OnHost(from, {self, "--" + mode + "send", c.net().host(to).address,
                              absl::StrCat(mib)}),
        {}, absl::Seconds(120));
    (*receiver)->Wait(absl::Seconds(10));
    return sent;
  };
  for (int t = 0; t < trials; ++t) {
    const auto sent = stream(1, 0, "", absl::StrCat("p9-receive-", t, ".log"));
    if (!sent) return 1;
    const double l = Field(sent->output, "link_mib_s");
    auto id = c.Submit(absl::StrCat("name: p9\nnodes: 1\nentrypoint: [\"", self,
                                    "\", \"--upload\", \"", mib, "\"]\n"));
    if (!id.ok()) {
      std::fprintf(stderr, "p9: %s\n", id.status().ToString().c_str());
      return 1;
    }
    auto st = c.WaitForFinal(*id, absl::Seconds(180));
    const frameworm::e2e::RunResult logs = c.Cli({"logs", *id, "--rank", "0"});
    const double u = Field(logs.output, "upload_mib_s");
    if (l <= 0 || u <= 0 || !st.ok() || st->state() != frameworm::v1::SUCCEEDED) {
      std::fprintf(stderr, "p9: trial %d failed: link %s / upload %s\n", t, sent->output.c_str(),
                   logs.output.c_str());
      return 1;
    }
    // Worker to worker: the same link measurement from host 1 to host 2,
    // then a replica's fetch over the same path.
    const std::string peer_host = c.net().host(1).address;
    const auto sent2 = stream(1, 2, "", absl::StrCat("p9-receive2-", t, ".log"));
    const auto tls_sent = stream(1, 2, "tls-", absl::StrCat("p9-tls-receive-", t, ".log"));
    if (!sent2 || !tls_sent) return 1;
    auto server = c.net().Start(1, {self, "--serve", absl::StrCat(mib)}, {},
                                absl::StrCat(c.dir(), "/p9-serve-", t, ".log"), "/tmp");
    absl::StatusOr<std::string> serving =
        server.ok() ? (*server)->WaitForLine("serving", absl::Seconds(60))
                    : absl::StatusOr<std::string>(server.status());
    if (!serving.ok()) {
      std::fprintf(stderr, "p9: the peer server on host 1 did not start\n");
      return 1;
    }
    const std::string checksum = serving->substr(serving->find("crc32:"), 14);
    const std::string secret = std::string(absl::StripAsciiWhitespace(
        serving->substr(std::min(serving->size(), serving->find("crc32:") + 15))));
    frameworm::e2e::RunResult fetched = frameworm::e2e::RunCommand(
        c.net().OnHost(2, {self, "--fetch", peer_host, absl::StrCat(mib), checksum}),
        {{"P9_SECRET", secret}}, absl::Seconds(300));
    server->reset();  // kills the server
    frameworm::e2e::RunResult wrote = frameworm::e2e::RunCommand(
        c.net().OnHost(2, {self, "--disk", absl::StrCat(mib)}), {}, absl::Seconds(300));
    const double pl = Field(sent2->output, "link_mib_s");
    const double p = Field(fetched.output, "peer_mib_s");
    const double pt = Field(tls_sent->output, "tls_mib_s");
    const double d = Field(wrote.output, "disk_mib_s");
    if (pl <= 0 || p <= 0 || pt <= 0 || d <= 0) {
      std::fprintf(stderr, "p9: trial %d failed: peer link %s / peer %s / tls %s / disk %s\n", t,
                   sent2->output.c_str(), fetched.output.c_str(), tls_sent->output.c_str(),
                   wrote.output.c_str());
      return 1;
    }
    const size_t cipher_at = tls_sent->output.find("\"cipher\":\"");
    const std::string cipher =
        cipher_at == std::string::npos
            ? "?"
            : tls_sent->output.substr(cipher_at + 10,
                                     tls_sent->output.find('"', cipher_at + 10) - cipher_at - 10);
    link.push_back(l);
    upload.push_back(u);
    peer_link.push_back(pl);
    peer.push_back(p);
    peer_tls.push_back(pt);
    disk.push_back(d);
    std::printf(
        "{\"trial\":%d,\"mib\":%lld,\"link_mib_s\":%.1f,\"upload_mib_s\":%.1f,"
        "\"peer_link_mib_s\":%.1f,\"peer_mib_s\":%.1f,\"peer_tls_mib_s\":%.1f,"
        "\"disk_mib_s\":%.1f,\"cipher\":\"%s\"}\n",
        t, mib, l, u, pl, p, pt, d, cipher.c_str());
    std::fflush(stdout);
  }
  std::printf(
      "{\"summary\":true,\"trials\":%d,\"mib\":%lld,\"link_mib_s_median\":%.1f,"
      "\"upload_mib_s_median\":%.1f,\"ratio\":%.3f,\"peer_link_mib_s_median\":%.1f,"
      "\"peer_mib_s_median\":%.1f,\"peer_ratio\":%.3f,\"peer_tls_mib_s_median\":%.1f,"
      "\"disk_mib_s_median\":%.1f,\"peer_ceiling_ratio\":%.3f}\n",
      trials, mib, Median(link), Median(upload), Median(upload) / Median(link),
      Median(peer_link), Median(peer), Median(peer) / Median(peer_link), Median(peer_tls),
      Median(disk), Median(peer) / std::min(Median(peer_tls), Median(disk)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  long long mib = 0;
  if (!args.empty() && args[0] == "--receive") return Receive();
  if (args.size() == 3 && args[0] == "--send" && absl::SimpleAtoi(args[2], &mib)) {
    return Send(args[1], mib);
  }
  if (args.size() == 2 && args[0] == "--upload" && absl::SimpleAtoi(args[1], &mib)) {
    return Upload(mib);
  }
  if (args.size() == 2 && args[0] == "--serve" && absl::SimpleAtoi(args[1], &mib)) {
    return Serve(mib);
  }
  if (!args.empty() && args[0] == "--tls-receive") {
    return frameworm::bench::TlsReceive(kTlsPort, frameworm::e2e::kTlsDir);
  }
  if (args.size() == 3 && args[0] == "--tls-send" && absl::SimpleAtoi(args[2], &mib)) {
    return frameworm::bench::TlsSend(args[1], kTlsPort, mib, frameworm::e2e::kTlsDir);
  }
  if (args.size() == 2 && args[0] == "--disk" && absl::SimpleAtoi(args[1], &mib)) {
    return frameworm::bench::DiskWrite("/tmp", mib);
  }
  if (args.size() == 4 && args[0] == "--fetch" && absl::SimpleAtoi(args[2], &mib)) {
    return Fetch(args[1], mib, args[3]);
  }
  int trials = 3;
  mib = 512;
  if (!args.empty() && !absl::SimpleAtoi(args[0], &trials)) trials = -1;
  if (args.size() > 1 && !absl::SimpleAtoi(args[1], &mib)) mib = -1;
  if (trials < 1 || mib < 1 || args.size() > 2) {
    std::fprintf(stderr, "usage: p9_copy [TRIALS] [MIB]\n");
    return 2;
  }
  return Bench(trials, mib);
}
