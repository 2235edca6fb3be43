// Checkpoint copies between workers: what a hold may name
// (CheckpointHoldings), and real PeerService servers on 127.0.0.1 under
// mutual TLS with certificates of a test CA (rpc/cluster_ca.h).
#include "worker/peer_service.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/received_file.h"
#include "rpc/file_stream.h"
#include "gtest/gtest.h"
#include "rpc/cluster_ca.h"
#include "rpc/rpc.h"
#include "worker/checkpoint_holdings.h"
#include "worker/holdings_file.h"

namespace frameworm {
namespace {
namespace fs = std::filesystem;

HeldCheckpoint Held(const std::string& path, int64_t step = 7) {
  HeldCheckpoint h;
  h.job_id = "job-000001";
  h.step = step;
  h.path = path;
  h.bytes = 0;
  h.checksum = "crc32:00000000";
  h.secret = "s3cret";
  return h;
}

TEST(CheckpointHoldingsTest, AHoldNamesOnlyACheckpointFileOfItsStep) {
  EXPECT_TRUE(CheckHold(Held("/ck/job-000001/ckpt-7.pt")).ok());
  for (const std::string bad :
       {"ck/job/ckpt-7.pt", "/ck/../etc/ckpt-7.pt", "/ck/./ckpt-7.pt", "/ck/..//ckpt-7.pt",
        "/ck/ckpt-8.pt", "/etc/passwd", "/ckpt-7.pt", "/ck/xckpt-7.pt.bak", ""}) {
    absl::Status s = CheckHold(Held(bad));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  HeldCheckpoint h = Held("/ck/ckpt-7.pt");
  h.job_id = "../x";
  EXPECT_EQ(CheckHold(h).code(), absl::StatusCode::kInvalidArgument);
  h = Held("/ck/ckpt-7.pt");
  h.checksum = "md5:abc";
  EXPECT_NE(CheckHold(h).message().find("crc32:xxxxxxxx"), std::string::npos);
  // What a hold brought is quoted printable: no line break or control byte
  // reaches a log through an error.
  h = Held("/ck/\n\x1b[31m/ckpt-8.pt");
  EXPECT_EQ(CheckHold(h).message().find_first_of("\n\x1b"), std::string::npos)
      << CheckHold(h).message();
  h = Held("/ck/ckpt-7.pt");
  h.checksum = "crc32:\r\n\x7f";
  EXPECT_EQ(CheckHold(h).message().find_first_of("\r\n\x7f"), std::string::npos);
  h = Held("/ck/ckpt-7.pt");
  h.bytes = -1;
  EXPECT_EQ(CheckHold(h).code(), absl::StatusCode::kInvalidArgument);
  h = Held("/ck/ckpt-7.pt");
  h.sources.assign(9, "127.0.0.1:1");
  EXPECT_NE(CheckHold(h).message().find("at most 8"), std::string::npos);
  // A source is dialled with the hold's secret: a TCP peer only.
  h.sources = {"w1.host:7071", "[::1]:7071"};
  EXPECT_TRUE(CheckHold(h).ok()) << CheckHold(h);
  for (const std::string local : {"unix:/tmp/peer.sock:1", "unix-abstract:evil:1", "w1.host"}) {
    h.sources = {"w1.host:7071", local};
    EXPECT_NE(CheckHold(h).message().find("is not HOST:PORT of a TCP peer"), std::string::npos)
        << local;
  }
  h = Held("/ck/ckpt-7.pt", -1);
  h.path = "/ck/ckpt--1.pt";
  EXPECT_EQ(CheckHold(h).code(), absl::StatusCode::kInvalidArgument);
}

// The list a worker keeps for its next start: written and read back; a
// line that does not parse, names no checkpoint file CheckHold accepts, or
// whose file changed size is left out; no file is an empty list.
TEST(CheckpointHoldingsTest, TheHoldingsFileKeepsOnlyWhatIsStillThere) {
  const std::string dir = ::testing::TempDir() + "/holdings_file_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir + "/ck");
  std::ofstream(dir + "/ck/ckpt-7.pt") << "1234";
  std::ofstream(dir + "/ck/ckpt-8.pt") << "12345678";
  HeldCheckpoint a = Held(dir + "/ck/ckpt-7.pt", 7);
  a.bytes = 4;
  a.copied = true;
  a.secret = std::string("s\t\n\0x", 6);  // any bytes
  HeldCheckpoint b = Held(dir + "/ck/ckpt-8.pt", 8);
  b.bytes = 5;  // the file has 8 now
  EXPECT_TRUE(ReadHoldingsFile(dir + "/none")->empty());
  ASSERT_TRUE(WriteHoldingsFile(dir + "/holdings", {a, b}).ok());
  {
    std::ofstream more(dir + "/holdings", std::ios::app);
    more << "garbage\n"
         << "v1\tjob-000001\t9\t4\tcrc32:00000000\t0\t00\t"
         << absl::BytesToHexString("/ck/../ckpt-9.pt") << "\n"
         << "v1\tjob-000001\t7\t4\tcrc32:00000000\t2\t00\t00\n";
  }
  auto read = ReadHoldingsFile(dir + "/holdings");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].path, a.path);
  EXPECT_EQ((*read)[0].secret, a.secret);
  EXPECT_TRUE((*read)[0].copied);
  EXPECT_EQ((*read)[0].step, 7);
  EXPECT_FALSE(fs::exists(dir + "/holdings.tmp." + std::to_string(::getpid())));
  fs::remove_all(dir);
}

TEST(CheckpointHoldingsTest, HoldingsAreBoundedAndDroppedPerStepOrJob) {
  CheckpointHoldings held;
  for (size_t i = 0; i < kMaxHeldCheckpoints; ++i) {
    HeldCheckpoint h = Held(absl::StrCat("/ck/ckpt-", i, ".pt"), static_cast<int64_t>(i));
    ASSERT_TRUE(held.Add(h).ok()) << i;
  }
  EXPECT_EQ(held.Add(Held("/ck/ckpt-5000.pt", 5000)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(held.Add(Held("/ck/ckpt-3.pt", 3)).ok()) << "replacing one is not growth";
  EXPECT_EQ(held.Remove("job-000001", 3).size(), 1u);
  EXPECT_FALSE(held.Find("job-000001", 3).has_value());
  EXPECT_TRUE(held.Find("job-000001", 4).has_value());
  EXPECT_EQ(held.Remove("job-000001", -1).size(), kMaxHeldCheckpoints - 1);
  EXPECT_EQ(held.size(), 0u);
}

class PeerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            absl::StrCat("fw-peer-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
                         ::getpid()))
               .string();
    fs::remove_all(dir_);
    ASSERT_TRUE(InitClusterCa(dir_ + "/ca").ok());
    for (const auto& [role, name] : std::vector<std::pair<std::string, std::string>>{
             {"worker", "a"}, {"worker", "b"}, {"user", "eve"}, {"coordinator", "main"}}) {
      ASSERT_TRUE(IssueCertificate(dir_ + "/ca", role, name, dir_ + "/tls-" + name).ok());
    }
    ::umask(077);
  }
  void TearDown() override {
    for (auto& s : servers_) s->Shutdown(absl::ToChronoTime(absl::Now()));
    fs::remove_all(dir_);
  }
  TlsFiles Tls(const std::string& name) {
    absl::StatusOr<TlsFiles> t = LoadTlsDir(dir_ + "/tls-" + name);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  // Serves `holdings` as worker `name`; its endpoint.
  std::string Serve(CheckpointHoldings& holdings, const std::string& name) {
    services_.push_back(std::make_unique<PeerServiceImpl>(holdings));
    return ServeService(services_.back().get(), name);
  }
  std::string ServeService(grpc::Service* service, const std::string& name) {
    ServerOptions o;
    o.tls = Tls(name);
    absl::StatusOr<StartedServer> s = StartServer(o, {service});
    EXPECT_TRUE(s.ok()) << s.status();
    servers_.push_back(std::move(s->server));
    return absl::StrCat("127.0.0.1:", s->port);
  }
  // A file of `n` bytes at `path`; its hold (no sources).
  HeldCheckpoint Write(const std::string& path, int64_t step, size_t n) {
    fs::create_directories(fs::path(path).parent_path());
    std::string data(n, '\0');
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(i * 131 + 7);
    std::ofstream(path, std::ios::binary) << data;
    HeldCheckpoint h = Held(path, step);
    h.bytes = static_cast<int64_t>(n);
    h.checksum = Crc32Text(UpdateCrc32(crc32(0L, Z_NULL, 0), data));
    return h;
  }
  static std::string Read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  absl::Status Fetch(const HeldCheckpoint& h, const std::string& as = "b", int streams = 0) {
    const TlsFiles tls = Tls(as);
    return FetchCheckpointFrom(h, &tls, absl::Seconds(20), stop_, nullptr, streams);
  }
  int FilesIn(const std::string& d) {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) n += e.is_regular_file() ? 1 : 0;
    return n;
  }

  // A holder of a 32 MiB checkpoint with room for one stream, that stream
  // taken by a reader of one chunk (Free() ends it); `copy` is the hold to
  // fetch it from that holder into worker b's directory.
  struct BusySource {
    CheckpointHoldings holdings;
    HeldCheckpoint copy;
    PeerServiceImpl* service = nullptr;
    std::unique_ptr<v1::PeerService::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> stream;
    void Free() {
      ctx.TryCancel();
      (void)stream->Finish();
    }
  };
  void MakeBusySource(BusySource& b) {
    const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, int64_t{32} << 20);
    ASSERT_TRUE(b.holdings.Add(src).ok());
    services_.push_back(
        std::make_unique<PeerServiceImpl>(b.holdings, absl::Seconds(60), /*max_streams=*/1));
    b.service = services_.back().get();
    const std::string endpoint = ServeService(b.service, "a");
    const TlsFiles tls = Tls("b");
    b.stub = v1::PeerService::NewStub(MakeChannel(endpoint, &tls, kWorkerTlsName));
    v1::FetchCheckpointRequest req;
    req.set_job_id(src.job_id);
    req.set_step(src.step);
    req.set_secret(src.secret);
    b.stream = b.stub->FetchCheckpoint(&b.ctx, req);
    v1::CheckpointChunk c;
    ASSERT_TRUE(b.stream->Read(&c));
    b.copy = src;
    b.copy.path = dir_ + "/b/ck/ckpt-7.pt";
    b.copy.sources = {endpoint};
  }

  std::string dir_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<PeerServiceImpl>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
};

TEST_F(PeerServiceTest, AWorkerFetchesAHeldCheckpointWhole) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, (3 << 20) + 12345);
  ASSERT_TRUE(a.Add(src).ok());
  const std::string endpoint = Serve(a, "a");
  HeldCheckpoint want = src;
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  want.sources = {endpoint};
  ASSERT_TRUE(Fetch(want).ok());
  EXPECT_EQ(Read(want.path), Read(src.path));
  EXPECT_EQ(FilesIn(dir_ + "/b/ck"), 1) << "no partial file is left";
}

TEST_F(PeerServiceTest, OnlyWorkersMayFetchAndOnlyFromAWorker) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, 1000);
  ASSERT_TRUE(a.Add(src).ok());
  HeldCheckpoint want = src;
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  want.sources = {Serve(a, "a")};
  absl::Status s = Fetch(want, "eve");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("only workers"), std::string::npos) << s;
  // The coordinator's certificate is for serving only (no clientAuth).
  EXPECT_FALSE(Fetch(want, "main").ok());
  EXPECT_FALSE(fs::exists(want.path));
  // A server with the coordinator's certificate is not a worker: refused
  // by the fetching worker's name check.
  CheckpointHoldings fake;
  ASSERT_TRUE(fake.Add(src).ok());
  want.sources = {Serve(fake, "main")};
  EXPECT_EQ(Fetch(want).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(fs::exists(want.path));
}

TEST_F(PeerServiceTest, AWorkerCertificateAloneIsNotEnoughTheHoldsSecretIsNeeded) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, 1000);
  ASSERT_TRUE(a.Add(src).ok());
  HeldCheckpoint want = src;
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  want.sources = {Serve(a, "a")};
  std::string held_answer;
  for (const std::string wrong : {"", "s3creT", "another job's secret"}) {
    want.secret = wrong;
    absl::Status s = Fetch(want);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << wrong << ": " << s;
    EXPECT_FALSE(fs::exists(want.path));
    held_answer = std::string(s.message());
  }
  want.secret = src.secret;
  EXPECT_TRUE(Fetch(want).ok());
  // Without the secret, a copy held and one not held look the same.
  ASSERT_FALSE(a.Remove(src.job_id, src.step).empty());
  fs::remove(want.path);
  want.secret = "another job's secret";
  absl::Status s = Fetch(want);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(std::string(s.message()), held_answer);
}

TEST_F(PeerServiceTest, OnTheSharedTmpfsTheDirectoriesMustBeThisUsersAlone) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, 1000);
  ASSERT_TRUE(a.Add(src).ok());
  const std::string root = "/dev/shm/fw-peer-test-" + std::to_string(::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  ::chmod(root.c_str(), 0777);  // as another user could have left it
  HeldCheckpoint want = src;
  want.path = root + "/job/ckpt-7.pt";
  want.sources = {Serve(a, "a")};
  absl::Status s = Fetch(want);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE(fs::exists(want.path));
  want.path = "/dev//shm/" + root.substr(9) + "/job/ckpt-7.pt";  // the same, spelled otherwise
  s = Fetch(want);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  want.path = root + "/job/ckpt-7.pt";
  ::chmod(root.c_str(), 0700);
  EXPECT_TRUE(Fetch(want).ok());
  fs::remove_all(root);
}

TEST_F(PeerServiceTest, NothingButAHeldCheckpointIsServed) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, 1000);
  const std::string endpoint = Serve(a, "a");
  HeldCheckpoint want = src;
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  want.sources = {endpoint};
  absl::Status s = Fetch(want);  // the file exists, but no hold names it
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(endpoint), std::string::npos) << s;
  // A symlink put in place of a held file is not followed.
  ASSERT_TRUE(a.Add(src).ok());
  fs::remove(src.path);
  fs::create_symlink("/etc/hostname", src.path);
  s = Fetch(want);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_FALSE(fs::exists(want.path));
}

TEST_F(PeerServiceTest, AWrongCopyIsRefusedAndTheNextSourceServes) {
  CheckpointHoldings bad, good;
  const HeldCheckpoint src = Write(dir_ + "/good/ck/ckpt-7.pt", 7, 5000);
  ASSERT_TRUE(good.Add(src).ok());
  HeldCheckpoint other = Write(dir_ + "/bad/ck/ckpt-7.pt", 7, 4000);  // another size
  ASSERT_TRUE(bad.Add(other).ok());
  HeldCheckpoint want = src;
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  want.sources = {Serve(bad, "a"), Serve(good, "a")};
  ASSERT_TRUE(Fetch(want).ok());
  EXPECT_EQ(Read(want.path), Read(src.path));
  // Same size, other bytes: the checksum does not match and nothing stays.
  fs::remove(want.path);
  {
    std::fstream f(src.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2500);
    f.put('\x55' ^ Read(src.path)[2500]);
  }
  want.sources = {want.sources[1]};
  absl::Status s = Fetch(want);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
  EXPECT_EQ(FilesIn(dir_ + "/b/ck"), 0);
}

TEST_F(PeerServiceTest, ACopyAlreadyInPlaceNeedsNoSourceAndNoSourceIsAnError) {
  const HeldCheckpoint here = Write(dir_ + "/shared/ck/ckpt-7.pt", 7, 2000);
  HeldCheckpoint want = here;
  want.sources = {"127.0.0.1:1"};  // nothing listens there
  EXPECT_TRUE(Fetch(want).ok()) << "a shared filesystem already has it";
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  absl::Status s = Fetch(want);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s;
  want.sources.clear();
  EXPECT_EQ(Fetch(want).code(), absl::StatusCode::kFailedPrecondition);
}

// A checkpoint fetched in several streams at once (ranges, each on a
// connection of its own, written where they belong) is the same file, and
// is checked as a whole: a changed byte in any range fails the checksum and
// nothing stays; a stop ends it with nothing left either.
TEST_F(PeerServiceTest, ACheckpointFetchedInRangesIsWholeAndChecked) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, (5 << 20) + 123);
  ASSERT_TRUE(a.Add(src).ok());
  HeldCheckpoint want = src;
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  want.sources = {Serve(a, "a")};
  for (int streams : {2, 3, 7}) {
    fs::remove(want.path);
    absl::Status s = Fetch(want, "b", streams);
    ASSERT_TRUE(s.ok()) << streams << ": " << s;
    EXPECT_EQ(Read(want.path), Read(src.path)) << streams;
    EXPECT_EQ(FilesIn(dir_ + "/b/ck"), 1) << "no partial file is left";
  }
  for (int64_t at : {int64_t{10}, (int64_t{5} << 20) + 100}) {  // in the first range, the last
    {
      std::fstream f(src.path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(at);
      f.put('\x55' ^ Read(src.path)[at]);
    }
    fs::remove(want.path);
    absl::Status s = Fetch(want, "b", 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << at << ": " << s;
    EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
    EXPECT_EQ(FilesIn(dir_ + "/b/ck"), 0) << at;
    std::fstream f(src.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.put('\x55' ^ Read(src.path)[at]);  // back as it was
  }
  stop_ = true;
  absl::Status s = Fetch(want, "b", 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(FilesIn(dir_ + "/b/ck"), 0);
  stop_ = false;
  EXPECT_TRUE(Fetch(want, "b", 3).ok());
}

// The server sends exactly the range asked for (total_bytes still the
// file's size) and refuses any range that is not inside the file.
TEST_F(PeerServiceTest, ARangeOutsideTheFileIsRefused) {
  CheckpointHoldings a;
  const int64_t size = (2 << 20) + 5;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, size);
  ASSERT_TRUE(a.Add(src).ok());
  const TlsFiles tls = Tls("b");
  auto stub = v1::PeerService::NewStub(MakeChannel(Serve(a, "a"), &tls, kWorkerTlsName));
  auto fetch = [&](int64_t offset, int64_t length, std::string* got) {
    grpc::ClientContext ctx;
    v1::FetchCheckpointRequest req;
    req.set_job_id(src.job_id);
    req.set_step(src.step);
    req.set_secret(src.secret);
    req.set_offset(offset);
    req.set_length(length);
    auto reader = stub->FetchCheckpoint(&ctx, req);
    v1::CheckpointChunk c;
    bool first = true;
    while (reader->Read(&c)) {
      if (first) EXPECT_EQ(c.total_bytes(), size);
      first = false;
      if (got != nullptr) *got += c.data();
    }
    return reader->Finish();
  };
  std::string got;
  ASSERT_TRUE(fetch((1 << 20) - 3, 1000, &got).ok());
  EXPECT_EQ(got, Read(src.path).substr((1 << 20) - 3, 1000));
  got.clear();
  ASSERT_TRUE(fetch(size - 5, 0, &got).ok());  // length 0: to the end
  EXPECT_EQ(got, Read(src.path).substr(size - 5));
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const auto& [offset, length] : std::vector<std::pair<int64_t, int64_t>>{
           {-1, 0}, {0, -1}, {size + 1, 0}, {size - 10, 11}, {kMax, 1}, {1, kMax}, {kMax, kMax}}) {
    grpc::Status s = fetch(offset, length, nullptr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << offset << "+" << length;
    EXPECT_NE(s.error_message().find("outside"), std::string::npos) << s.error_message();
  }
}

// Descriptors of this process open on `path`.
int OpenFdsOn(const std::string& path) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    std::error_code lec;
    if (fs::read_symlink(e.path(), lec) == fs::path(path)) ++n;
  }
  return n;
}

// A fetcher that takes the first chunk and then stops reading (the file
// is larger than what HTTP/2 flow control lets the server send ahead)
// holds the server's chunk and the held file open only until its stream
// has moved no chunk for the service's stream_idle (1 s here): then the
// call is cancelled and the file closed. Without the cut the descriptor
// stays open as long as the client keeps the call.
TEST_F(PeerServiceTest, AFetcherThatStopsReadingIsCutOffAndTheFileClosed) {
  CheckpointHoldings a;
  const int64_t size = int64_t{96} << 20;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, size);
  ASSERT_TRUE(a.Add(src).ok());
  services_.push_back(std::make_unique<PeerServiceImpl>(a, absl::Seconds(1)));
  const TlsFiles tls = Tls("b");
  auto stub = v1::PeerService::NewStub(
      MakeChannel(ServeService(services_.back().get(), "a"), &tls, kWorkerTlsName));
  grpc::ClientContext ctx;
  v1::FetchCheckpointRequest req;
  req.set_job_id(src.job_id);
  req.set_step(src.step);
  req.set_secret(src.secret);
  auto reader = stub->FetchCheckpoint(&ctx, req);
  v1::CheckpointChunk c;
  ASSERT_TRUE(reader->Read(&c));
  int64_t got = static_cast<int64_t>(c.data().size());
  const absl::Time stopped = absl::Now();
  EXPECT_EQ(OpenFdsOn(src.path), 1) << "the server sends from the held file";
  int open = 1;
  for (int i = 0; i < 100 && open > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    open = OpenFdsOn(src.path);
  }
  EXPECT_EQ(open, 0) << "the stalled stream still holds the file";
  EXPECT_GE(absl::Now() - stopped, absl::Milliseconds(900));
  // What was under way arrives, then the cut.
  while (reader->Read(&c)) got += static_cast<int64_t>(c.data().size());
  const grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_LT(got, size);
}

// A worker serves a bounded number of checkpoint streams at once, in all
// and to one caller: one more is RESOURCE_EXHAUSTED, and a slot is free
// again once a stream ends.
TEST_F(PeerServiceTest, StreamsServedAtOnceAreBoundedInAllAndPerCaller) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, int64_t{32} << 20);
  ASSERT_TRUE(a.Add(src).ok());
  services_.push_back(std::make_unique<PeerServiceImpl>(a, absl::Seconds(60), /*max_streams=*/3,
                                                        /*max_streams_per_caller=*/2));
  const std::string endpoint = ServeService(services_.back().get(), "a");
  const TlsFiles tls_b = Tls("b"), tls_a = Tls("a");
  auto stub_b = v1::PeerService::NewStub(MakeChannel(endpoint, &tls_b, kWorkerTlsName));
  auto stub_a = v1::PeerService::NewStub(MakeChannel(endpoint, &tls_a, kWorkerTlsName));
  v1::FetchCheckpointRequest req;
  req.set_job_id(src.job_id);
  req.set_step(src.step);
  req.set_secret(src.secret);
  struct Open {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> reader;
  };
  // Each reads its first chunk and then nothing: the stream stays open.
  auto open = [&](v1::PeerService::Stub& stub, Open& o) {
    o.reader = stub.FetchCheckpoint(&o.ctx, req);
    v1::CheckpointChunk c;
    return o.reader->Read(&c);
  };
  auto refused = [](Open& o) {
    const grpc::Status st = o.reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    return st.error_message();
  };
  Open b1, b2, b3, a1, a2;
  ASSERT_TRUE(open(*stub_b, b1));
  ASSERT_TRUE(open(*stub_b, b2));
  EXPECT_FALSE(open(*stub_b, b3));
  EXPECT_NE(refused(b3).find("2 checkpoint streams to this caller"), std::string::npos);
  ASSERT_TRUE(open(*stub_a, a1)) << "another worker still has room";
  EXPECT_FALSE(open(*stub_a, a2));
  EXPECT_NE(refused(a2).find("3 checkpoint streams already"), std::string::npos);
  b1.ctx.TryCancel();
  (void)b1.reader->Finish();
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {  // the server sees the cancel soon
    Open again;
    served = open(*stub_b, again);
    if (served) again.ctx.TryCancel();
    (void)again.reader->Finish();
    if (!served) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(served) << "the ended stream's slot was not freed";
  for (Open* o : {&b2, &a1}) {
    o->ctx.TryCancel();
    (void)o->reader->Finish();
  }
  // Plaintext callers (loopback here) count in all only: three streams
  // from one of them fit a limit of three in all, two per caller.
  services_.push_back(std::make_unique<PeerServiceImpl>(a, absl::Seconds(60), /*max_streams=*/3,
                                                        /*max_streams_per_caller=*/2));
  ServerOptions plain;
  absl::StatusOr<StartedServer> started = StartServer(plain, {services_.back().get()});
  ASSERT_TRUE(started.ok()) << started.status();
  servers_.push_back(std::move(started->server));
  auto stub_plain = v1::PeerService::NewStub(
      MakeChannel(absl::StrCat("127.0.0.1:", started->port), nullptr, kWorkerTlsName));
  Open p1, p2, p3, p4;
  EXPECT_TRUE(open(*stub_plain, p1));
  EXPECT_TRUE(open(*stub_plain, p2));
  EXPECT_TRUE(open(*stub_plain, p3)) << "a plaintext caller was held to the per-caller limit";
  EXPECT_FALSE(open(*stub_plain, p4));
  EXPECT_NE(refused(p4).find("3 checkpoint streams already"), std::string::npos);
  for (Open* o : {&p1, &p2, &p3}) {
    o->ctx.TryCancel();
    (void)o->reader->Finish();
  }
}

// A source that is busy (every stream it may serve taken) is asked again a
// little later, not given up: the fetch succeeds once a stream ends.
TEST_F(PeerServiceTest, ABusySourceIsAskedAgainLater) {
  BusySource busy;
  ASSERT_NO_FATAL_FAILURE(MakeBusySource(busy));
  absl::Status fetched;
  std::thread fetch([&] { fetched = Fetch(busy.copy, "b", /*streams=*/1); });
  // Refused at least once before the stream ends, so it was asked again.
  for (int i = 0; i < 500 && busy.service->busy_refusals() < 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(busy.service->busy_refusals(), 1);
  busy.Free();
  fetch.join();
  EXPECT_TRUE(fetched.ok()) << fetched;
  EXPECT_TRUE(Read(busy.copy.path) == Read(dir_ + "/a/ck/ckpt-7.pt")) << "the copy differs";
}

// A fetch waiting on a busy source ends soon once the worker stops, and
// asks that source nothing more.
TEST_F(PeerServiceTest, AFetchWaitingOnABusySourceEndsWhenStopped) {
  BusySource busy;
  ASSERT_NO_FATAL_FAILURE(MakeBusySource(busy));
  absl::Status fetched;
  absl::Time ended;
  std::thread fetch([&] {
    fetched = Fetch(busy.copy, "b", /*streams=*/1);
    ended = absl::Now();
  });
  // Three refusals: the wait after the third is at least 0.4 s.
  for (int i = 0; i < 1000 && busy.service->busy_refusals() < 3; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(busy.service->busy_refusals(), 3);
  const absl::Time stopped = absl::Now();
  stop_ = true;
  const int64_t refusals = busy.service->busy_refusals();
  fetch.join();
  EXPECT_FALSE(fetched.ok());
  EXPECT_LT(ended - stopped, absl::Milliseconds(300)) << "the wait outlasted the stop";
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_LE(busy.service->busy_refusals(), refusals + 1) << "asked again after the stop";
  EXPECT_FALSE(fs::exists(busy.copy.path));
  busy.Free();
}

// A ranged fetch that a source cannot serve whole (fewer streams free than
// ranges) is asked again in one stream, and arrives.
TEST_F(PeerServiceTest, ARangedFetchFromABusySourceFallsBackToOneStream) {
  CheckpointHoldings a;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, int64_t{65} << 20);
  ASSERT_TRUE(a.Add(src).ok());
  services_.push_back(std::make_unique<PeerServiceImpl>(a, absl::Seconds(60), /*max_streams=*/2));
  HeldCheckpoint h = src;
  h.path = dir_ + "/b/ck/ckpt-7.pt";
  h.sources = {ServeService(services_.back().get(), "a")};
  const absl::Status fetched = Fetch(h, "b", /*streams=*/4);
  EXPECT_TRUE(fetched.ok()) << fetched;
  EXPECT_GE(services_.back()->busy_refusals(), 1) << "every range was served";
  EXPECT_TRUE(Read(h.path) == Read(src.path)) << "the copy differs";
}

// A peer that ignores ranges (an older worker, or another implementation
// that always sends the whole file): the fetch notices that a stream sent
// more than its range and takes the file in one stream instead.
TEST_F(PeerServiceTest, APeerThatIgnoresRangesIsFetchedInOneStream) {
  class WholeFile final : public v1::PeerService::CallbackService {
   public:
    explicit WholeFile(std::string path) : path_(std::move(path)) {}
    grpc::ServerWriteReactor<v1::CheckpointChunk>* FetchCheckpoint(
        grpc::CallbackServerContext*, const v1::FetchCheckpointRequest*) override {
      return new FileSendReactor<v1::CheckpointChunk>(nullptr, nullptr, path_, "the whole file");
    }

   private:
    const std::string path_;
  };
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, (3 << 20) + 9);
  WholeFile old(src.path);
  HeldCheckpoint want = src;
  want.path = dir_ + "/b/ck/ckpt-7.pt";
  want.sources = {ServeService(&old, "a")};
  absl::Status s = Fetch(want, "b", 3);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Read(want.path), Read(src.path));
  EXPECT_EQ(FilesIn(dir_ + "/b/ck"), 1);
}

// A source that takes the call and then sends nothing (its first chunk
// or, below, after one chunk) is given up after `stall` and the next
// source serves; in one stream and in ranges alike. A shutdown (`stop`)
// ends a fetch stuck on such a source at once.
class Silent final : public v1::PeerService::CallbackService {
 public:
  explicit Silent(std::string path = "") : path_(std::move(path)) {}
  grpc::ServerWriteReactor<v1::CheckpointChunk>* FetchCheckpoint(
      grpc::CallbackServerContext*, const v1::FetchCheckpointRequest* req) override {
    // One chunk (when it has a file), then silence until cancelled.
    class Stuck final : public grpc::ServerWriteReactor<v1::CheckpointChunk> {
     public:
      explicit Stuck(const std::string& path, int64_t offset) {
        if (path.empty()) return;
        std::ifstream in(path, std::ios::binary);
        in.seekg(offset);
        std::string data(1 << 20, '\0');
        in.read(data.data(), data.size());
        chunk_.set_total_bytes(static_cast<int64_t>(std::filesystem::file_size(path)));
        chunk_.set_data(data.substr(0, in.gcount()));
        StartWrite(&chunk_);
      }
      void OnWriteDone(bool) override {}
      void OnCancel() override { Finish(grpc::Status::CANCELLED); }
      void OnDone() override { delete this; }

     private:
      v1::CheckpointChunk chunk_;
    };
    return new Stuck(path_, req->offset());
  }

 private:
  const std::string path_;
};

TEST_F(PeerServiceTest, ASilentSourceIsGivenUpAndTheNextServes) {
  CheckpointHoldings held;
  const HeldCheckpoint src = Write(dir_ + "/a/ck/ckpt-7.pt", 7, (3 << 20) + 9);
  HeldCheckpoint mine = src;
  mine.sources.clear();
  ASSERT_TRUE(held.Add(mine).ok());
  const std::string good = Serve(held, "a");
  Silent mute, one_chunk(src.path);
  const std::string mute_at = ServeService(&mute, "a"), one_at = ServeService(&one_chunk, "a");
  const TlsFiles tls = Tls("b");
  for (const int streams : {1, 3}) {
    HeldCheckpoint want = src;
    want.path = absl::StrCat(dir_, "/b", streams, "/ck/ckpt-7.pt");
    want.sources = {mute_at, one_at, good};
    const absl::Time start = absl::Now();
    absl::Status s = FetchCheckpointFrom(want, &tls, absl::Seconds(60), stop_, nullptr, streams,
                                         absl::Seconds(1));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << "each silent source cost its stall only";
    EXPECT_EQ(Read(want.path), Read(src.path));
    EXPECT_EQ(FilesIn(absl::StrCat(dir_, "/b", streams, "/ck")), 1) << "no partial file left";
    want.sources = {one_at};
    want.path = absl::StrCat(dir_, "/c", streams, "/ck/ckpt-7.pt");
    s = FetchCheckpointFrom(want, &tls, absl::Seconds(60), stop_, nullptr, streams,
                            absl::Seconds(1));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("no chunk for 1s (the source stalled)"), std::string::npos) << s;
    EXPECT_EQ(FilesIn(absl::StrCat(dir_, "/c", streams, "/ck")), 0);
  }
  // The default stall is 30 s; a shutdown does not wait for it.
  HeldCheckpoint want = src;
  want.path = dir_ + "/d/ck/ckpt-7.pt";
  want.sources = {mute_at};
  std::thread stopper([this] {
    absl::SleepFor(absl::Milliseconds(500));
    stop_ = true;
  });
  const absl::Time start = absl::Now();
  absl::Status s = FetchCheckpointFrom(want, &tls, absl::Seconds(60), stop_, nullptr, 1);
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace frameworm
