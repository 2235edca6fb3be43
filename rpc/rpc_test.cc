#include "rpc/rpc.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rpc/status_util.h"
#include "rpc/test_trainer_service.h"

namespace frameworm {
namespace {

TEST(Rpc, StartServerPicksFreePortAndServes) {
  testing::RecordingTrainerService svc;
  auto started = StartServer({}, {&svc});
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_GT(started->port, 0);
  auto stub = v1::TrainerService::NewStub(
      MakeChannel(absl::StrCat("127.0.0.1:", started->port)));
  grpc::ClientContext ctx;
  v1::StepMetrics req;
  req.set_step(1);
  v1::ReportStepResponse resp;
  ASSERT_TRUE(stub->ReportStep(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.checkpoint_at_step(), 11);
  started->server->Shutdown();
}

TEST(Rpc, PortInUseIsUnavailable) {
  testing::RecordingTrainerService svc1, svc2;
  auto first = StartServer({}, {&svc1});
  ASSERT_TRUE(first.ok());
  ServerOptions o;
  o.listen = absl::StrCat("127.0.0.1:", first->port);
  auto second = StartServer(o, {&svc2});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(o.listen), std::string::npos);
  first->server->Shutdown();
}

TEST(Rpc, BadListenAddressIsRefused) {
  testing::RecordingTrainerService svc;
  ServerOptions o;
  o.listen = "not-an-address:xyz";
  auto s = StartServer(o, {&svc});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  // gRPC itself would listen on 99999 - 65536 = 34463.
  o.listen = "127.0.0.1:99999";
  s = StartServer(o, {&svc});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("the port must be 0..65535"), std::string::npos)
      << s.status();
  // A host that is no address of this machine cannot be bound.
  o.listen = "192.0.2.1:0";
  s = StartServer(o, {&svc});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
}

TEST(Rpc, OversizedMessageIsRefused) {
  testing::RecordingTrainerService svc;
  ServerOptions o;
  o.max_message_bytes = 64 << 10;
  auto started = StartServer(o, {&svc});
  ASSERT_TRUE(started.ok());
  auto stub = v1::TrainerService::NewStub(
      MakeChannel(absl::StrCat("127.0.0.1:", started->port)));
  v1::CheckpointRecord big;
  big.set_path(std::string(200 << 10, 'x'));
  grpc::ClientContext ctx;
  v1::ReportCheckpointResponse resp;
  grpc::Status s = stub->ReportCheckpoint(&ctx, big, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_TRUE(svc.checkpoints().empty());
  started->server->Shutdown();
}

// Many concurrent large requests, each on a connection of its own, push
// the server past its memory quota: gRPC refuses some with
// RESOURCE_EXHAUSTED instead of buffering them all, and serves again once
// they are gone. Without a quota the same flood is buffered and served.
int RefusedOfFlood(size_t quota, int calls, int payload_bytes, bool* small_call_after_ok) {
  testing::RecordingTrainerService svc;
  ServerOptions o;
  o.memory_quota_bytes = quota;
  auto started = StartServer(o, {&svc});
  if (!started.ok()) return -1;
  const std::string target = absl::StrCat("127.0.0.1:", started->port);
  v1::CheckpointRecord big;
  big.set_path(std::string(payload_bytes, 'x'));
  std::vector<std::unique_ptr<v1::TrainerService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::ReportCheckpointResponse> responses(calls);
  std::atomic<int> done{0}, refused{0};
  for (int i = 0; i < calls; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection each
    args.SetMaxSendMessageSize(-1);
    stubs.push_back(v1::TrainerService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stubs.back()->async()->ReportCheckpoint(contexts.back().get(), &big, &responses[i],
                                            [&](grpc::Status s) {
                                              if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
                                                ++refused;
                                              }
                                              ++done;
                                            });
  }
  // Each call has a 60 s deadline: bounded.
  while (done.load() < calls) absl::SleepFor(absl::Milliseconds(10));
  auto stub = v1::TrainerService::NewStub(MakeChannel(target));
  grpc::ClientContext ctx;
  v1::StepMetrics req;
  req.set_step(1);
  v1::ReportStepResponse resp;
  *small_call_after_ok = stub->ReportStep(&ctx, req, &resp).ok();
  started->server->Shutdown();
  return refused;
}

TEST(Rpc, AFloodOfLargeRequestsMeetsTheMemoryQuota) {
  bool after_ok = false;
  EXPECT_GT(RefusedOfFlood(8 << 20, 48, 4 << 20, &after_ok), 0);
  EXPECT_TRUE(after_ok);
  EXPECT_EQ(RefusedOfFlood(0, 48, 4 << 20, &after_ok), 0);
  EXPECT_TRUE(after_ok);
}

// One connection has at most max_streams_per_connection calls open: the
// rest wait in the client until one ends, and all complete.
TEST(Rpc, OneConnectionsOpenCallsAreBounded) {
  testing::RecordingTrainerService svc;
  ServerOptions o;
  o.max_streams_per_connection = 4;
  auto started = StartServer(o, {&svc});
  ASSERT_TRUE(started.ok()) << started.status();
  auto stub = v1::TrainerService::NewStub(
      MakeChannel(absl::StrCat("127.0.0.1:", started->port)));
  constexpr int kCalls = 10;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::ReportStepResponse> responses(kCalls);
  v1::StepMetrics held;
  held.set_rank(99);  // held open by the service until released
  std::atomic<int> ok{0}, done{0};
  for (int i = 0; i < kCalls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub->async()->ReportStep(contexts.back().get(), &held, &responses[i], [&](grpc::Status s) {
      ok += s.ok();
      ++done;
    });
  }
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(svc.steps().size(), 4u) << "calls open on one connection";
  // Bounded: each round releases the held calls; at most 10 rounds of 2 s.
  for (int round = 0; round < 10 && done.load() < kCalls; ++round) {
    svc.ReleaseHeld();
    for (int i = 0; i < 200 && done.load() < kCalls && svc.steps().size() <= 4u * (round + 1);
         ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  while (done.load() < kCalls) {  // each call has a 30 s deadline
    svc.ReleaseHeld();
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(ok.load(), kCalls);
  EXPECT_EQ(svc.steps().size(), static_cast<size_t>(kCalls));
  started->server->Shutdown();
}

// A gzip request is refused before it is inflated; the same uncompressed
// passes.
TEST(Rpc, CompressedRequestsAreRefused) {
  testing::RecordingTrainerService svc;
  auto started = StartServer(ServerOptions{}, {&svc});
  ASSERT_TRUE(started.ok());
  auto stub = v1::TrainerService::NewStub(
      MakeChannel(absl::StrCat("127.0.0.1:", started->port)));
  v1::CheckpointRecord rec;
  rec.set_path(std::string(1 << 20, 'x'));  // 1 MiB that gzip makes about 1 KB
  for (const bool gzip : {true, false}) {
    grpc::ClientContext ctx;
    if (gzip) ctx.set_compression_algorithm(GRPC_COMPRESS_GZIP);
    v1::ReportCheckpointResponse resp;
    grpc::Status s = stub->ReportCheckpoint(&ctx, rec, &resp);
    if (gzip) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
      EXPECT_TRUE(svc.checkpoints().empty());
    } else {
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(svc.checkpoints().size(), 1u);
    }
  }
  started->server->Shutdown();
}

TEST(StatusUtil, CodesMapOneToOne) {
  grpc::Status g(grpc::StatusCode::ABORTED, "old generation");
  absl::Status a = FromGrpcStatus(g, "ReportStep");
  EXPECT_EQ(a.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(a.message(), "ReportStep: old generation");
  grpc::Status back = ToGrpcStatus(absl::NotFoundError("no job x"));
  EXPECT_EQ(back.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(back.error_message(), "no job x");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  // gRPC's own UNIMPLEMENTED comes without a message: it gets one.
  absl::Status bare = FromGrpcStatus(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""), "Submit");
  EXPECT_EQ(bare.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(bare.message().find("Submit: the server does not have this call"), std::string::npos);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no batches here"))
                .message(),
            "no batches here");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace frameworm
