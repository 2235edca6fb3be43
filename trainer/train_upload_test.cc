// frameworm-train's rank 0 against a real gRPC TrainerService on 127.0.0.1
// (rpc/test_trainer_service.h) that holds uploads open: its in-memory
// checkpoints are reported while a disk checkpoint uploads, and it exits
// only once every disk checkpoint is recorded (trainer/checkpoint_uploader.h).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpc/rpc.h"
#include "rpc/test_trainer_service.h"
#include "trainer/train_process.h"

namespace frameworm {
namespace {

using testutil::RunTrain;

TEST(FramewormTrainUploadTest, InMemoryCheckpointsGoOnWhileADiskCheckpointUploads) {
  testing::RecordingTrainerService service;
  service.HoldUploads(true);
  auto started = StartServer({}, {&service});
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string dir = testutil::MakeTempDir("fwtrain-upload");
  const std::string root = dir + "/shm";
  ASSERT_EQ(::mkdir(root.c_str(), 0700), 0);
  testutil::Result r;
  std::thread run([&] {
    r = RunTrain(absl::StrCat("--model=mlp --dataset=synthetic --max-steps=200 --batch-size=16 ",
                              "--checkpoint-dir=", dir, "/ckpt --checkpoint-every=20 ",
                              "--memory-checkpoint-dir=", root, "/job --memory-checkpoint-every=3"),
                 absl::StrCat("FRAMEWORM_COORDINATOR=127.0.0.1:", started->port,
                              " FRAMEWORM_JOB_ID=job-1 FRAMEWORM_GENERATION=1"));
  });
  // The first disk checkpoint's upload is held open; in-memory checkpoints
  // of later steps are reported meanwhile, and nothing of the disk one.
  int64_t held = -1, memory_after = -1;
  for (int i = 0; i < 3000 && memory_after < 0; ++i) {
    std::vector<int64_t> up = service.uploads();
    if (!up.empty()) held = up[0];
    for (const auto& c : service.checkpoints()) {
      if (held >= 0 && c.memory() && c.step() > held) memory_after = c.step();
    }
    if (memory_after < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool disk_reported = false;
  for (const auto& c : service.checkpoints()) disk_reported = disk_reported || !c.memory();
  // The step reports meanwhile say a checkpoint of that step or later is
  // in flight (so the coordinator does not take its request for missed).
  int64_t in_flight = 0;
  for (int i = 0; i < 500 && in_flight < held; ++i) {
    for (const auto& m : service.steps()) in_flight = std::max(in_flight, m.checkpoint_in_flight());
    if (in_flight < held) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  service.HoldUploads(false);
  run.join();
  EXPECT_GE(held, 0) << "no upload began\n" << r.err;
  EXPECT_GT(memory_after, held) << "no in-memory checkpoint was reported during the upload\n"
                                << r.err;
  EXPECT_FALSE(disk_reported) << "a disk checkpoint was reported before its upload ended";
  EXPECT_GE(in_flight, held) << "no step report said a checkpoint was uploading";
  ASSERT_EQ(r.code, 0) << r.err;
  // Every upload that began was reported before the trainer exited, the
  // last one (the final checkpoint, at the step the service's stop
  // directive ended the run) included.
  std::vector<int64_t> disk;
  for (const auto& c : service.checkpoints()) {
    if (!c.memory()) disk.push_back(c.step());
  }
  EXPECT_EQ(disk, service.uploads());
  ASSERT_FALSE(disk.empty());
  EXPECT_EQ(disk.back(), static_cast<int64_t>(testutil::Field(r.last_line(), "steps")))
      << r.last_line();
  started->server->Shutdown();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace frameworm
