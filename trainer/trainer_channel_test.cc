#include "trainer/trainer_channel.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <fstream>
#include <filesystem>
#include <thread>

#include "trainer/checkpoint_handover.h"
#include "trainer/checkpoint_uploader.h"
#include "trainer/liveness_pinger.h"
#include "trainer/step_reporter.h"
#include "absl/strings/str_cat.h"
#include "common/received_file.h"
#include "gtest/gtest.h"
#include "rpc/rpc.h"
#include "rpc/test_trainer_service.h"

namespace frameworm {
namespace {

class TrainerChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = StartServer({}, {&service_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    address_ = absl::StrCat("127.0.0.1:", started->port);
  }
  void TearDown() override {
    service_.ReleaseHeld();
    server_->Shutdown();
  }
  std::unique_ptr<ControlChannel> Channel(const std::string& job_id,
                                          int64_t generation) {
    TrainerChannelOptions o;
    o.coordinator = address_;
    o.job_id = job_id;
    o.generation = generation;
    o.call_timeout = absl::Seconds(5);
    auto ch = NewTrainerChannel(o);
    EXPECT_TRUE(ch.ok()) << ch.status();
    return std::move(*ch);
  }

  testing::RecordingTrainerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(TrainerChannelTest, ReportStepSendsEveryFieldAndReturnsDirective) {
  auto ch = Channel("job-7", 3);
  StepReport r;
  r.rank = 1;
  r.step = 42;
  r.epoch = 2;
  r.samples = 64;
  r.step_seconds = 0.25;
  r.wait_seconds = 0.125;
  r.data_seconds = 0.0625;
  r.total_steps = 900;
  r.progress_only = true;
  r.values = {{"loss", 0.5}, {"accuracy", 0.875}};
  auto d = ch->ReportStep(r);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->checkpoint_at_step, 52);
  EXPECT_FALSE(d->stop);

  auto steps = service_.steps();
  ASSERT_EQ(steps.size(), 1u);
  const v1::StepMetrics& m = steps[0];
  EXPECT_EQ(m.ref().job_id(), "job-7");
  EXPECT_EQ(m.ref().generation(), 3);
  EXPECT_EQ(m.rank(), 1);
  EXPECT_EQ(m.step(), 42);
  EXPECT_EQ(m.epoch(), 2);
  EXPECT_EQ(m.samples(), 64);
  EXPECT_DOUBLE_EQ(m.step_seconds(), 0.25);
  EXPECT_DOUBLE_EQ(m.wait_seconds(), 0.125);
  EXPECT_DOUBLE_EQ(m.data_seconds(), 0.0625);
  EXPECT_FALSE(m.ping());
  EXPECT_EQ(m.total_steps(), 900);
  EXPECT_TRUE(m.progress_only());
  ASSERT_EQ(m.values().size(), 2u);
  EXPECT_DOUBLE_EQ(m.values().at("loss"), 0.5);
  EXPECT_DOUBLE_EQ(m.values().at("accuracy"), 0.875);

  r.step = 100;
  d = ch->ReportStep(r);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->stop);
}

// The liveness thread pings through a real channel to a real server: the
// last step and how long the training thread has waited, until stopped.
TEST_F(TrainerChannelTest, TheLivenessPingerPingsUntilStopped) {
  auto ch = Channel("job-7", 3);
  std::atomic<int> probes{0};
  {
    LivenessPinger pinger(ch.get(), 1, [&](StepReport& r) {
      probes++;
      r.step = 17;
      r.waiting_seconds = 2.5;
      StepReport::Collectives c;
      c.enqueued = 42;
      c.completed = 41;
      c.recent.push_back({42, "allreduce", "gradients", 3, 4096, "started", 2.6, 0});
      r.collectives = c;
    }, std::chrono::milliseconds(20));
    for (int i = 0; i < 200 && service_.steps().size() < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pinger.Stop();
  }
  const size_t sent = service_.steps().size();
  ASSERT_GE(sent, 3u);
  const v1::StepMetrics m = service_.steps()[0];
  EXPECT_TRUE(m.ping());
  EXPECT_TRUE(m.progress_only());
  EXPECT_EQ(m.rank(), 1);
  EXPECT_EQ(m.step(), 17);
  EXPECT_DOUBLE_EQ(m.waiting_seconds(), 2.5);
  EXPECT_TRUE(m.measures_wait());
  EXPECT_EQ(m.collectives().enqueued(), 42);
  EXPECT_EQ(m.collectives().completed(), 41);
  ASSERT_EQ(m.collectives().recent_size(), 1);
  EXPECT_EQ(m.collectives().recent(0).ShortDebugString(),
            "seq: 42 op: \"allreduce\" what: \"gradients\" bucket: 3 bytes: 4096 state: \"started\" "
            "age_seconds: 2.6");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(service_.steps().size(), sent) << "pinged after Stop";
  LivenessPinger none(nullptr, 0, [&](StepReport&) {});
}

StepReport StepNumber(int64_t step) {
  StepReport r;
  r.rank = 0;
  r.step = step;
  r.values = {{"loss", 1.0 / static_cast<double>(step)}};
  return r;
}

// The step reporter: the training thread only queues; every report
// arrives, in order, in far fewer calls than reports (batches), and the
// coordinator's directive comes back on a later Submit.
TEST_F(TrainerChannelTest, TheStepReporterSendsEveryReportInOrderInBatches) {
  auto ch = Channel("job-7", 3);
  StepReporter reporter(ch.get());
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= 500; ++step) {
    auto d = reporter.Submit(StepNumber(step));
    ASSERT_TRUE(d.ok()) << d.status();
  }
  const double queued = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(queued, 0.5) << "Submit must not wait for the coordinator";
  ASSERT_TRUE(reporter.Close(std::chrono::seconds(10)).ok());
  const std::vector<v1::StepMetrics> got = service_.steps();
  ASSERT_EQ(got.size(), 500u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(got[i].ref().job_id(), "job-7");
  }
  EXPECT_EQ(reporter.sent(), 500);
  EXPECT_EQ(reporter.dropped(), 0);
  EXPECT_LT(reporter.calls(), 500);
  const std::vector<int> sizes = service_.batch_sizes();
  EXPECT_EQ(static_cast<int64_t>(sizes.size()), reporter.calls());
  EXPECT_LE(*std::max_element(sizes.begin(), sizes.end()), 64);
  // After a call came back, Submit returns its directive.
  StepReporter again(ch.get());
  (void)again.Submit(StepNumber(7));
  ASSERT_TRUE(again.Close(std::chrono::seconds(10)).ok());
  StepReporter third(ch.get());
  (void)third.Submit(StepNumber(8));
  for (int i = 0; i < 200 && third.sent() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto d = third.Submit(StepNumber(9));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->checkpoint_at_step, 18);
}

// Calls are paced: a report every millisecond makes about one call per
// min_interval, not one per report; a full batch goes at once, and
// SendNow and Close send what waits without waiting out the pause.
TEST_F(TrainerChannelTest, TheStepReporterPacesItsCalls) {
  auto ch = Channel("job-7", 3);
  {
    StepReporter reporter(ch.get(), 64, 4096, std::chrono::milliseconds(50));
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 1; step <= 300; ++step) {
      ASSERT_TRUE(reporter.Submit(StepNumber(step)).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(reporter.Close(std::chrono::seconds(10)).ok());
    EXPECT_EQ(reporter.sent(), 300);
    // One call at the first report, one per 50 ms after it, one at Close.
    EXPECT_LE(reporter.calls(), static_cast<int64_t>(elapsed / 0.05) + 2) << elapsed << " s";
  }
  const std::vector<v1::StepMetrics> got = service_.steps();
  ASSERT_EQ(got.size(), 300u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].step(), static_cast<int64_t>(i + 1));

  // An hour's pause: the first report goes at once, a full batch goes at
  // once, and Close flushes the rest.
  StepReporter slow(ch.get(), 8, 4096, std::chrono::hours(1));
  ASSERT_TRUE(slow.Submit(StepNumber(1)).ok());
  for (int i = 0; i < 500 && slow.sent() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(slow.sent(), 1);
  for (int64_t step = 2; step <= 9; ++step) ASSERT_TRUE(slow.Submit(StepNumber(step)).ok());
  for (int i = 0; i < 500 && slow.sent() < 9; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(slow.sent(), 9);
  EXPECT_EQ(slow.calls(), 2);
  for (int64_t step = 10; step <= 12; ++step) ASSERT_TRUE(slow.Submit(StepNumber(step)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(slow.sent(), 9) << "three reports, less than a batch, wait for the pause";
  slow.SendNow();  // a checkpoint or a stop at this step
  for (int i = 0; i < 500 && slow.sent() < 12; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(slow.sent(), 12);
  EXPECT_EQ(slow.calls(), 3);
  ASSERT_TRUE(slow.Submit(StepNumber(13)).ok());
  ASSERT_TRUE(slow.Close(std::chrono::seconds(10)).ok());
  EXPECT_EQ(slow.sent(), 13);
  EXPECT_EQ(slow.calls(), 4);
  EXPECT_EQ(service_.steps().size(), 313u);
}

// An older coordinator without ReportSteps: the same reports, one call each.
TEST_F(TrainerChannelTest, TheStepReporterFallsBackToSingleReports) {
  service_.set_batches(false);
  auto ch = Channel("job-7", 3);
  StepReporter reporter(ch.get());
  for (int64_t step = 1; step <= 20; ++step) ASSERT_TRUE(reporter.Submit(StepNumber(step)).ok());
  ASSERT_TRUE(reporter.Close(std::chrono::seconds(10)).ok());
  const std::vector<v1::StepMetrics> got = service_.steps();
  ASSERT_EQ(got.size(), 20u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].step(), static_cast<int64_t>(i + 1));
  EXPECT_TRUE(service_.batch_sizes().empty());
}

// A generation that is over (ABORTED) is terminal: Submit returns it from
// then on and nothing more is sent. A coordinator that cannot be reached
// until Close's flush time runs out costs the reports still queued, and
// the trainer goes on.
TEST_F(TrainerChannelTest, TheStepReporterStopsAtAbortedAndSurvivesAnAbsentCoordinator) {
  auto ch = Channel("stale", 1);
  StepReporter reporter(ch.get());
  ASSERT_TRUE(reporter.Submit(StepNumber(1)).ok());
  absl::StatusOr<StepDirective> d = StepDirective{};
  for (int i = 0; i < 500 && d.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    d = reporter.Submit(StepNumber(2 + i));
  }
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kAborted) << d.status();
  EXPECT_EQ(reporter.Close(std::chrono::seconds(1)).code(), absl::StatusCode::kAborted);
  const size_t seen = service_.steps().size();
  EXPECT_EQ(reporter.Submit(StepNumber(999)).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(service_.steps().size(), seen);

  TrainerChannelOptions o;
  o.coordinator = "127.0.0.1:1";  // nothing listens there
  o.job_id = "job-7";
  o.generation = 3;
  o.call_timeout = absl::Milliseconds(300);
  auto away = NewTrainerChannel(o);
  ASSERT_TRUE(away.ok()) << away.status();
  StepReporter lost(away->get());
  for (int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(lost.Submit(StepNumber(step)).ok());
  EXPECT_TRUE(lost.Close(std::chrono::seconds(2)).ok());
  EXPECT_EQ(lost.sent(), 0);
  EXPECT_EQ(lost.dropped(), 5);
}

// A coordinator away (UNAVAILABLE, DEADLINE_EXCEEDED) loses no report: the
// failed batches are sent again, in order, once it answers. A refused
// batch (any other code) is dropped and the reports after it still go.
TEST_F(TrainerChannelTest, TheStepReporterSendsAgainWhatTheCoordinatorWasAwayFor) {
  auto ch = Channel("job-7", 3);
  {
    service_.FailNextBatches(2, grpc::StatusCode::UNAVAILABLE);
    StepReporter reporter(ch.get(), 8, 4096, std::chrono::milliseconds(0));
    for (int64_t step = 1; step <= 40; ++step) ASSERT_TRUE(reporter.Submit(StepNumber(step)).ok());
    ASSERT_TRUE(reporter.Close(std::chrono::seconds(10)).ok());
    EXPECT_EQ(service_.failed_batches().size(), 2u);
    EXPECT_GE(reporter.requeued(), 2);
    EXPECT_EQ(reporter.sent(), 40);
    EXPECT_EQ(reporter.dropped(), 0);
  }
  std::vector<v1::StepMetrics> got = service_.steps();
  ASSERT_EQ(got.size(), 40u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].step(), static_cast<int64_t>(i + 1));
  {
    service_.FailNextBatches(1, grpc::StatusCode::DEADLINE_EXCEEDED);
    StepReporter reporter(ch.get());
    for (int64_t step = 41; step <= 50; ++step) ASSERT_TRUE(reporter.Submit(StepNumber(step)).ok());
    ASSERT_TRUE(reporter.Close(std::chrono::seconds(10)).ok());
    EXPECT_EQ(reporter.sent(), 10);
    EXPECT_EQ(reporter.dropped(), 0);
  }
  got = service_.steps();
  ASSERT_EQ(got.size(), 50u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].step(), static_cast<int64_t>(i + 1));
  {
    service_.FailNextBatches(1, grpc::StatusCode::INVALID_ARGUMENT);
    StepReporter reporter(ch.get(), 64, 4096, std::chrono::milliseconds(0));
    ASSERT_TRUE(reporter.Submit(StepNumber(51)).ok());
    for (int i = 0; i < 500 && service_.failed_batches().size() < 4; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(reporter.Submit(StepNumber(52)).ok());
    ASSERT_TRUE(reporter.Close(std::chrono::seconds(10)).ok());
    EXPECT_EQ(reporter.requeued(), 0);
    EXPECT_EQ(reporter.dropped(), 1);
    EXPECT_EQ(reporter.sent(), 1);
  }
  got = service_.steps();
  ASSERT_EQ(got.size(), 51u);
  EXPECT_EQ(got.back().step(), 52);
  // Past max_queued while the coordinator is away, the oldest go.
  {
    service_.FailNextBatches(1000000, grpc::StatusCode::UNAVAILABLE);
    StepReporter reporter(ch.get(), 4, 6, std::chrono::milliseconds(0));
    for (int64_t step = 1; step <= 10; ++step) ASSERT_TRUE(reporter.Submit(StepNumber(100 + step)).ok());
    for (int i = 0; i < 500 && reporter.requeued() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    service_.FailNextBatches(0, grpc::StatusCode::UNAVAILABLE);
    ASSERT_TRUE(reporter.Close(std::chrono::seconds(10)).ok());
    EXPECT_EQ(reporter.sent() + reporter.dropped(), 10);
    EXPECT_EQ(reporter.sent(), 6);
  }
  got = service_.steps();
  ASSERT_EQ(got.size(), 57u);
  for (size_t i = 52; i < got.size(); ++i) EXPECT_EQ(got[i].step(), got[i - 1].step() + 1);
  EXPECT_EQ(got.back().step(), 110);
}

// The real thing: nothing listens on the coordinator's port at first
// (gRPC's own UNAVAILABLE), then a server starts there; every report made
// meanwhile arrives once, in order.
TEST(TrainerChannel, ReportsMadeBeforeTheCoordinatorListensArriveOnceItDoes) {
  testing::RecordingTrainerService service;
  auto probe = StartServer({}, {&service});
  ASSERT_TRUE(probe.ok()) << probe.status();
  const int port = probe->port;
  probe->server->Shutdown();
  probe->server.reset();
  TrainerChannelOptions o;
  o.coordinator = absl::StrCat("127.0.0.1:", port);
  o.job_id = "job-7";
  o.generation = 3;
  o.call_timeout = absl::Seconds(2);
  auto ch = NewTrainerChannel(o);
  ASSERT_TRUE(ch.ok()) << ch.status();
  StepReporter reporter(ch->get(), 64, 4096, std::chrono::milliseconds(50));
  for (int64_t step = 1; step <= 30; ++step) {
    ASSERT_TRUE(reporter.Submit(StepNumber(step)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(reporter.requeued(), 0) << "no call failed while nothing listened";
  ServerOptions so;
  so.listen = absl::StrCat("127.0.0.1:", port);
  auto server = StartServer(so, {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  for (int64_t step = 31; step <= 40; ++step) ASSERT_TRUE(reporter.Submit(StepNumber(step)).ok());
  ASSERT_TRUE(reporter.Close(std::chrono::seconds(15)).ok());
  server->server->Shutdown();
  EXPECT_EQ(reporter.sent(), 40);
  EXPECT_EQ(reporter.dropped(), 0);
  const std::vector<v1::StepMetrics> got = service.steps();
  ASSERT_EQ(got.size(), 40u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].step(), static_cast<int64_t>(i + 1));
}

TEST_F(TrainerChannelTest, ReportCheckpointSendsRecord) {
  auto ch = Channel("job-8", 2);
  CheckpointReport c;
  c.step = 200;
  c.path = "/ckpt/step-200.pt";
  c.bytes = 12345;
  c.checksum = "abcdef";
  ASSERT_TRUE(ch->ReportCheckpoint(c).ok());
  auto cps = service_.checkpoints();
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_EQ(cps[0].ref().job_id(), "job-8");
  EXPECT_EQ(cps[0].ref().generation(), 2);
  EXPECT_EQ(cps[0].step(), 200);
  EXPECT_EQ(cps[0].path(), "/ckpt/step-200.pt");
  EXPECT_EQ(cps[0].bytes(), 12345);
  EXPECT_EQ(cps[0].checksum(), "abcdef");
}

// A downloaded copy is checked against the record's checksum that the
// coordinator sends with its first chunk: bytes that differ (a copy damaged
// on the coordinator's disk) are DATA_LOSS naming both and leave nothing;
// without a checksum (an older coordinator) only the size is checked.
TEST_F(TrainerChannelTest, ADownloadedCopyIsCheckedAgainstItsRecord) {
  auto ch = Channel("job-7", 3);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/download-", ::getpid());
  std::string bytes((3 << 20) + 17, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 13 + 1);
  const std::string good = Crc32Text(UpdateCrc32(0, bytes));
  service_.ServeDownload(bytes, good);
  ASSERT_TRUE(ch->DownloadCheckpoint("/ck/ckpt-5.pt", dir + "/a.pt").ok());
  std::ifstream in(dir + "/a.pt", std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_TRUE(got.str() == bytes);
  std::string damaged = bytes;
  damaged[1 << 20] ^= 0x10;
  service_.ServeDownload(damaged, good);
  const absl::Status s = ch->DownloadCheckpoint("/ck/ckpt-5.pt", dir + "/b.pt");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("its record says " + good), std::string::npos) << s;
  std::error_code ec;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir, ec),
                          std::filesystem::directory_iterator()),
            1)
      << "the damaged copy left a file";
  service_.ServeDownload(damaged, "");
  EXPECT_TRUE(ch->DownloadCheckpoint("/ck/ckpt-5.pt", dir + "/c.pt").ok());
  std::filesystem::remove_all(dir);
}

// A copy this host cannot write (a full disk; here a file-size limit) is
// INTERNAL, never DATA_LOSS: that would report a good checkpoint bad.
TEST_F(TrainerChannelTest, ADownloadThisHostCannotWriteIsNotDataLoss) {
  auto ch = Channel("job-7", 3);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/download-full-", ::getpid());
  std::string bytes((3 << 20) + 5, 'x');
  service_.ServeDownload(bytes, Crc32Text(UpdateCrc32(0, bytes)));
  struct rlimit was {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &was), 0);
  struct rlimit small = was;
  small.rlim_cur = 1 << 20;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status s = ch->DownloadCheckpoint("/ck/ckpt-5.pt", dir + "/a.pt");
  ::setrlimit(RLIMIT_FSIZE, &was);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_empty(dir, ec)) << "a partial file was left";
  std::filesystem::remove_all(dir);
}

// A coordinator that breaks its own announcement (more bytes than the size
// its first chunk named, a negative size) is DATA_LOSS, and the download
// stops at once: no byte past the announced size reaches the disk, the rest
// of the stream is not read, and nothing is left behind.
TEST_F(TrainerChannelTest, ADownloadPastItsAnnouncedSizeStopsAndLeavesNothing) {
  auto ch = Channel("job-7", 3);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/download-over-", ::getpid());
  constexpr int kChunks = 64;
  std::string bytes(static_cast<size_t>(kChunks) << 20, 'y');
  service_.ServeDownload(bytes, Crc32Text(UpdateCrc32(0, bytes)), /*announced=*/2 << 20);
  absl::Status s = ch->DownloadCheckpoint("/ck/ckpt-5.pt", dir + "/a.pt");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("more than the 2097152 bytes"), std::string::npos) << s;
  EXPECT_LT(service_.download_chunks_sent(), kChunks) << "the whole stream was read";
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_empty(dir, ec)) << "a partial file was left";
  service_.ServeDownload("abc", "", /*announced=*/-5);
  s = ch->DownloadCheckpoint("/ck/ckpt-5.pt", dir + "/b.pt");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("-5 bytes"), std::string::npos) << s;
  EXPECT_TRUE(std::filesystem::is_empty(dir, ec)) << "a partial file was left";
  std::filesystem::remove_all(dir);
}

// A size no disk here has room for (a hostile or corrupt record) is
// refused before any byte is written: RESOURCE_EXHAUSTED naming the
// numbers, not DATA_LOSS, and no file.
TEST_F(TrainerChannelTest, ADownloadLargerThanTheDiskIsRefusedUpFront) {
  auto ch = Channel("job-7", 3);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/download-huge-", ::getpid());
  service_.ServeDownload("abc", "", /*announced=*/int64_t{1} << 60);
  const absl::Status s = ch->DownloadCheckpoint("/ck/ckpt-5.pt", dir + "/a.pt");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_empty(dir, ec)) << "a file was left";
  std::filesystem::remove_all(dir);
}

// Files for HandOverCheckpoint: a disk and a memory directory, each with
// the ckpt-<step>.pt files of `steps`.
struct HandOverDirs {
  std::string disk, memory, outside;
  explicit HandOverDirs(const std::string& name) {
    const std::string root = absl::StrCat(::testing::TempDir(), "/", name, "-", ::getpid());
    disk = root + "/disk";
    memory = root + "/shm/job";
    outside = root + "/outside";
    for (const std::string& d : {disk, memory, outside}) std::filesystem::create_directories(d);
  }
  ~HandOverDirs() { std::filesystem::remove_all(std::filesystem::path(disk).parent_path()); }
  static std::string Write(const std::string& dir, const std::string& name) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << "data";
    return path;
  }
  static bool Exists(const std::string& path) { return std::filesystem::exists(path); }
};

CheckpointReport Report(int64_t step, const std::string& path, bool memory) {
  CheckpointReport r;
  r.step = step;
  r.path = path;
  r.bytes = 4;
  r.checksum = "crc32:0000abcd";
  r.memory = memory;
  return r;
}

// An in-memory checkpoint the coordinator did not record is removed: no
// record means nothing resumes from it, expires it or releases it, and it
// holds a whole snapshot of the node's RAM. One the coordinator records
// after being away stays.
TEST_F(TrainerChannelTest, AnInMemoryCheckpointThatWasNotRecordedIsRemoved) {
  auto ch = Channel("job-7", 3);
  HandOverDirs dirs("handover-memory");
  const std::string mem = HandOverDirs::Write(dirs.memory, "ckpt-5.pt");
  service_.FailNextCheckpointReports(4, grpc::StatusCode::UNAVAILABLE);  // away past the tries
  absl::Status s = HandOverCheckpoint(*ch, Report(5, mem, true), dirs.disk, dirs.memory,
                                      absl::Milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("its report to the coordinator failed"), std::string::npos) << s;
  EXPECT_EQ(service_.checkpoint_calls(), 4) << "one call and 3 more tries";
  EXPECT_FALSE(HandOverDirs::Exists(mem));
  // A refusal (not away) is not tried again.
  const std::string refused = HandOverDirs::Write(dirs.memory, "ckpt-6.pt");
  service_.FailNextCheckpointReports(1, grpc::StatusCode::PERMISSION_DENIED);
  s = HandOverCheckpoint(*ch, Report(6, refused, true), dirs.disk, dirs.memory,
                         absl::Milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(service_.checkpoint_calls(), 5);
  EXPECT_FALSE(HandOverDirs::Exists(refused));
  // Away for less than the tries: recorded, and kept.
  const std::string kept = HandOverDirs::Write(dirs.memory, "ckpt-7.pt");
  service_.FailNextCheckpointReports(2, grpc::StatusCode::DEADLINE_EXCEEDED);
  s = HandOverCheckpoint(*ch, Report(7, kept, true), dirs.disk, dirs.memory,
                         absl::Milliseconds(10));
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(HandOverDirs::Exists(kept));
  ASSERT_EQ(service_.checkpoints().size(), 1u);
  EXPECT_TRUE(service_.checkpoints()[0].memory());
}

// A disk checkpoint whose upload fails is not reported and stays on disk
// (a refusal that is not UNAVAILABLE is not tried again).
TEST_F(TrainerChannelTest, ADiskCheckpointThatCouldNotBeUploadedStaysUnreported) {
  auto ch = Channel("job-7", 3);
  HandOverDirs dirs("handover-disk");
  const std::string disk = HandOverDirs::Write(dirs.disk, "ckpt-5.pt");
  service_.RefuseUploads(grpc::StatusCode::UNIMPLEMENTED);
  const absl::Status s = HandOverCheckpoint(*ch, Report(5, disk, false), dirs.disk, dirs.memory,
                                            absl::Milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("its upload to the coordinator failed"), std::string::npos) << s;
  EXPECT_TRUE(HandOverDirs::Exists(disk));
  EXPECT_EQ(service_.checkpoint_calls(), 0);
}

// The files the coordinator answers as expired are removed only when they
// are ckpt-<step>.pt files directly in the disk or the memory directory.
TEST_F(TrainerChannelTest, OnlyExpiredCheckpointFilesInTheJobsDirectoriesAreRemoved) {
  auto ch = Channel("job-7", 3);
  HandOverDirs dirs("handover-expired");
  const std::string old_disk = HandOverDirs::Write(dirs.disk, "ckpt-1.pt");
  const std::string old_mem = HandOverDirs::Write(dirs.memory, "ckpt-2.pt");
  const std::string other = HandOverDirs::Write(dirs.disk, "notes.txt");
  const std::string elsewhere = HandOverDirs::Write(dirs.outside, "ckpt-3.pt");
  const std::string target = HandOverDirs::Write(dirs.outside, "ckpt-4.pt");
  std::filesystem::create_symlink(target, dirs.disk + "/ckpt-4.pt");
  std::filesystem::create_directories(dirs.disk + "/sub");
  const std::string nested = HandOverDirs::Write(dirs.disk + "/sub", "ckpt-5.pt");
  service_.set_expired({old_disk, old_mem, other, elsewhere, dirs.disk + "/ckpt-4.pt",
                        dirs.disk + "/../outside/ckpt-3.pt", nested});
  const std::string mem = HandOverDirs::Write(dirs.memory, "ckpt-9.pt");
  ASSERT_TRUE(HandOverCheckpoint(*ch, Report(9, mem, true), dirs.disk, dirs.memory).ok());
  EXPECT_FALSE(HandOverDirs::Exists(old_disk));
  EXPECT_FALSE(HandOverDirs::Exists(old_mem));
  for (const std::string& p : {other, elsewhere, target, nested, mem}) {
    EXPECT_TRUE(HandOverDirs::Exists(p)) << p;
  }
  EXPECT_TRUE(std::filesystem::is_symlink(dirs.disk + "/ckpt-4.pt"));
}

// The uploader hands disk checkpoints over on its own thread: Submit
// returns at once while an upload runs; one more waits, and a newer one
// supersedes it (its file removed, reported as failed, never uploaded);
// Drain returns once the last one is recorded.
TEST_F(TrainerChannelTest, TheUploaderHandsOverInOrderAndANewerCheckpointSupersedesAWaitingOne) {
  HandOverDirs dirs("uploader");
  std::mutex mu;
  std::vector<std::pair<int64_t, absl::StatusCode>> failed;
  service_.HoldUploads(true);
  {
    CheckpointUploader up(Channel("job-7", 3), dirs.disk, dirs.memory,
                          [&](const CheckpointReport& r, const absl::Status& s) {
                            std::lock_guard<std::mutex> l(mu);
                            failed.emplace_back(r.step, s.code());
                          });
    // Destroyed before `up` (whose destructor drains): a failed assertion
    // below releases the held upload instead of hanging.
    struct Release {
      testing::RecordingTrainerService& s;
      ~Release() { s.HoldUploads(false); }
    } release{service_};
    const std::string p10 = HandOverDirs::Write(dirs.disk, "ckpt-10.pt");
    const std::string p20 = HandOverDirs::Write(dirs.disk, "ckpt-20.pt");
    const std::string p30 = HandOverDirs::Write(dirs.disk, "ckpt-30.pt");
    up.Submit(Report(10, p10, false));
    // Step 10's upload is held open by the service: 20 waits behind it.
    for (int i = 0; i < 500 && service_.uploads().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(service_.uploads(), std::vector<int64_t>{10});
    EXPECT_FALSE(up.Drain(absl::Milliseconds(50))) << "drained with an upload held open";
    const auto t0 = std::chrono::steady_clock::now();
    up.Submit(Report(20, p20, false));
    up.Submit(Report(30, p30, false));  // supersedes 20
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4))
        << "Submit waited for an upload";
    EXPECT_FALSE(HandOverDirs::Exists(p20)) << "the superseded file stays";
    {
      std::lock_guard<std::mutex> l(mu);
      ASSERT_EQ(failed.size(), 1u);
      EXPECT_EQ(failed[0], std::make_pair(int64_t{20}, absl::StatusCode::kAborted));
    }
    EXPECT_TRUE(service_.checkpoints().empty()) << "reported before its upload ended";
    service_.HoldUploads(false);
    EXPECT_TRUE(up.Drain(absl::Seconds(30)));
    EXPECT_EQ(service_.uploads(), (std::vector<int64_t>{10, 30}));
    std::vector<int64_t> reported;
    for (const auto& c : service_.checkpoints()) reported.push_back(c.step());
    EXPECT_EQ(reported, (std::vector<int64_t>{10, 30}));
    EXPECT_TRUE(HandOverDirs::Exists(p10) && HandOverDirs::Exists(p30));
    // A failure reaches `failed` with the hand-over's error.
    service_.RefuseUploads(grpc::StatusCode::RESOURCE_EXHAUSTED);
    const std::string p40 = HandOverDirs::Write(dirs.disk, "ckpt-40.pt");
    up.Submit(Report(40, p40, false));
    // Destroyed without Drain: the destructor drains.
  }
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[1], std::make_pair(int64_t{40}, absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(service_.checkpoints().size(), 2u);
}

TEST_F(TrainerChannelTest, AbortedStaysAborted) {
  auto ch = Channel("stale", 1);
  auto d = ch->ReportStep(StepReport{});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kAborted) << d.status();
  EXPECT_NE(d.status().message().find("not current"), std::string::npos)
      << d.status();
}

TEST_F(TrainerChannelTest, SlowCoordinatorHitsPerCallDeadline) {
  TrainerChannelOptions o;
  o.coordinator = address_;
  o.job_id = "job-1";
  o.call_timeout = absl::Milliseconds(200);
  auto ch = NewTrainerChannel(o);
  ASSERT_TRUE(ch.ok());
  StepReport r;
  r.rank = 99;  // held open by the test service
  auto d = (*ch)->ReportStep(r);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDeadlineExceeded)
      << d.status();
}

TEST(TrainerChannel, UnreachableCoordinatorIsUnavailable) {
  // Bind a port, then free it: nothing listens there any more.
  testing::RecordingTrainerService svc;
  auto started = StartServer({}, {&svc});
  ASSERT_TRUE(started.ok());
  int port = started->port;
  started->server->Shutdown();
  started->server.reset();

  TrainerChannelOptions o;
  o.coordinator = absl::StrCat("127.0.0.1:", port);
  o.job_id = "job-1";
  o.call_timeout = absl::Seconds(2);
  auto ch = NewTrainerChannel(o);
  ASSERT_TRUE(ch.ok());
  auto d = (*ch)->ReportStep(StepReport{});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
  EXPECT_EQ((*ch)->ReportCheckpoint({}).status().code(), absl::StatusCode::kUnavailable);
}

TEST(TrainerChannel, RefusesEmptyOptions) {
  TrainerChannelOptions o;
  o.job_id = "j";
  EXPECT_EQ(NewTrainerChannel(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.coordinator = "127.0.0.1:1";
  o.job_id = "";
  auto s = NewTrainerChannel(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("FRAMEWORM_JOB_ID"), std::string::npos);
  o.job_id = "j";
  o.call_timeout = absl::ZeroDuration();
  EXPECT_EQ(NewTrainerChannel(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frameworm
