// End-to-end on a GPU (labels "nccl" and "e2e"): a frameworm-coordinator and
// one frameworm-worker on 127.0.0.1 run the built-in trainer with
// `train: {device: cuda}` and `backend: nccl` to SUCCEEDED.
//
// No torch here: a GPU is "visible" when `nvidia-smi -L` lists one (or,
// without nvidia-smi, /dev/nvidia0 exists). Without one the test is
// skipped, unless FRAMEWORM_REQUIRE_CUDA=1 (bench/gpu.sh on the GPU
// machine), which makes that a failure. FRAMEWORM_DATA_DIR names the
// Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist).
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"

namespace frameworm::e2e {
namespace {

bool RequireCuda() {
  const char* v = std::getenv("FRAMEWORM_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

std::string DataDir() {
  const char* d = std::getenv("FRAMEWORM_DATA_DIR");
  return d != nullptr && *d != '\0' ? d : "/usr/share/datasets/fashion-mnist";
}

// `name` on $PATH, or "".
std::string OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string p = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// True when a GPU is visible; else `why` says what was looked at.
bool GpuVisible(std::string* why) {
  const std::string smi = OnPath("nvidia-smi");
  if (!smi.empty()) {
    RunResult r = RunCommand({smi, "-L"}, {}, absl::Seconds(30));
    if (r.exit_code == 0 && r.output.find("GPU") != std::string::npos) return true;
    *why = absl::StrCat("`nvidia-smi -L` exited ", r.exit_code, ": ", r.output);
    return false;
  }
  if (access("/dev/nvidia0", F_OK) == 0) return true;
  *why = "no nvidia-smi on PATH and no /dev/nvidia0";
  return false;
}

std::string GpuJob(int steps) {
  return absl::StrCat(R"(name: gpu-job
nodes: 1
nproc_per_node: 1
backend: nccl
max_restarts: 0
train:
  model: cnn
  dataset: fashion-mnist
  data_dir: )", DataDir(), R"(
  device: cuda
  max_steps: )", steps, R"(
  batch_size: 256
  log_every: 10
checkpoint:
  every_n_steps: )", steps / 2, R"(
  keep_last: 2
)");
}

TEST(GpuClusterE2E, BuiltInTrainerRunsOnCudaThroughAJob) {
  std::string why;
  if (!GpuVisible(&why)) {
    if (RequireCuda()) FAIL() << "FRAMEWORM_REQUIRE_CUDA=1 but no GPU is visible: " << why;
    GTEST_SKIP() << "no GPU: " << why;
  }
  ASSERT_EQ(access((DataDir() + "/train-images-idx3-ubyte.gz").c_str(), R_OK), 0)
      << "no Fashion-MNIST in " << DataDir() << " (set FRAMEWORM_DATA_DIR)";
  ClusterOptions o;
  o.workers = 1;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  constexpr int kSteps = 100;
  auto id = (*c)->Submit(GpuJob(kSteps));
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(150));
  RunResult logs = (*c)->Cli({"logs", *id, "--rank", "0"});
  ASSERT_TRUE(st.ok()) << st.status() << "\nrank 0:\n" << logs.output << "\nworker:\n"
                       << (*c)->worker(0).Output();
  ASSERT_EQ(st->state(), v1::SUCCEEDED)
      << st->ShortDebugString() << "\nrank 0:\n" << logs.output << "\nworker:\n"
      << (*c)->worker(0).Output();
  EXPECT_EQ(st->restarts(), 0);
  // The trainer averaged its gradients over NCCL, so it trained on the GPU.
  EXPECT_NE(logs.output.find("\"gradient_allreduce\":\"nccl\""), std::string::npos) << logs.output;
  EXPECT_NE(logs.output.find("\"event\":\"done\""), std::string::npos) << logs.output;

  grpc::ClientContext mctx;
  v1::GetMetricsRequest mreq;
  mreq.set_job_id(*id);
  v1::GetMetricsResponse metrics;
  ASSERT_TRUE((*c)->jobs().GetMetrics(&mctx, mreq, &metrics).ok());
  ASSERT_GT(metrics.steps_size(), 1);
  EXPECT_EQ(metrics.steps(metrics.steps_size() - 1).step(), kSteps);
  EXPECT_LT(metrics.steps(metrics.steps_size() - 1).mean().at("loss"),
            metrics.steps(0).mean().at("loss"));

  grpc::ClientContext cctx;
  v1::ListCheckpointsRequest creq;
  creq.set_job_id(*id);
  v1::ListCheckpointsResponse cks;
  ASSERT_TRUE((*c)->jobs().ListCheckpoints(&cctx, creq, &cks).ok());
  ASSERT_FALSE(cks.checkpoints().empty());
  EXPECT_EQ(cks.checkpoints(cks.checkpoints_size() - 1).step(), kSteps);
  EXPECT_TRUE(std::ifstream(cks.checkpoints(cks.checkpoints_size() - 1).path()).good());
}

}  // namespace
}  // namespace frameworm::e2e
