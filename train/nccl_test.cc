// The NCCL backend and the training library on a real GPU, at world size 1
// (label "nccl"): a DDP step on the GPU equals the CPU step, a checkpoint
// written on the GPU loads on the CPU and back, a snapshot of GPU state is
// held in pinned host memory and keeps its step while training goes on, and
// bf16 autocast training reaches fp32's accuracy on Fashion-MNIST.
//
// Without CUDA the GPU tests are skipped, unless FRAMEWORM_REQUIRE_CUDA=1
// (bench/gpu.sh sets it on the GPU machine): then a missing device, or an
// NCCL backend that was not compiled in, fails the test, so a broken CUDA
// set-up cannot pass as "skipped". FRAMEWORM_DATA_DIR names the
// Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist).
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "train/checkpoint_snapshot.h"
#include "train/data.h"
#include "train/launch.h"
#include "train/models.h"
#include "train/process_group.h"
#include "train/test_util.h"
#include "train/trainer.h"

namespace frameworm {
namespace {

bool RequireCuda() {
  const char* v = std::getenv("FRAMEWORM_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

std::string CudaDiagnosis() {
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  return absl::StrCat("torch::cuda::device_count()=", torch::cuda::device_count(),
                      ", CUDA_VISIBLE_DEVICES=", vis ? vis : "(unset)",
                      ", /dev/nvidiactl ", access("/dev/nvidiactl", F_OK) == 0 ? "exists" : "missing",
                      ", /dev/nvidia0 ", access("/dev/nvidia0", F_OK) == 0 ? "exists" : "missing");
}

// Skips the test without CUDA, fails it instead under FRAMEWORM_REQUIRE_CUDA=1;
// with CUDA, the NCCL backend must have been compiled in.
#define FRAMEWORM_NEED_CUDA()                                                      \
  do {                                                                             \
    if (!torch::cuda::is_available()) {                                            \
      if (RequireCuda()) {                                                         \
        FAIL() << "FRAMEWORM_REQUIRE_CUDA=1 but torch sees no CUDA device: "       \
               << CudaDiagnosis();                                                 \
      }                                                                            \
      GTEST_SKIP() << "no CUDA device";                                            \
    }                                                                              \
    ASSERT_TRUE(NcclCompiledIn())                                                  \
        << "CUDA is available but the nccl backend was not compiled in "          \
           "(NCCL_INCLUDE_DIR or the CUDA toolkit was not found at configure time)"; \
  } while (0)

std::string DataDir() {
  const char* d = std::getenv("FRAMEWORM_DATA_DIR");
  return d != nullptr && *d != '\0' ? d : "/usr/share/datasets/fashion-mnist";
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> NcclGroup() {
  auto port = PickFreePort();
  if (!port.ok()) return port.status();
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.master_port = *port;
  return CreateProcessGroup(o);
}

std::shared_ptr<torch::optim::SGD> Sgd(torch::nn::Module& m, double lr = 0.05) {
  return std::make_shared<torch::optim::SGD>(m.parameters(),
                                             torch::optim::SGDOptions(lr).momentum(0.9));
}

// IEEE float32 on the GPU for the scope (no TF32 in convolutions or
// matmuls), so CPU and GPU results differ by float rounding only.
class NoTf32 {
 public:
  NoTf32()
      : cudnn_(at::globalContext().allowTF32CuDNN()),
        cublas_(at::globalContext().allowTF32CuBLAS()) {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  ~NoTf32() {
    at::globalContext().setAllowTF32CuDNN(cudnn_);
    at::globalContext().setAllowTF32CuBLAS(cublas_);
  }

 private:
  bool cudnn_, cublas_;
};

// Parameters of `m` (CPU copies) against `ref`: within rtol/atol, naming
// the worst parameter.
void ExpectParamsClose(torch::nn::Module& m, torch::nn::Module& ref, double rtol, double atol,
                       const std::string& what) {
  auto a = m.named_parameters(true);
  auto b = ref.named_parameters(true);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < a.size(); ++i) {
    torch::Tensor x = a[i].value().detach().to(torch::kCPU);
    torch::Tensor y = b[i].value().detach().to(torch::kCPU);
    ASSERT_EQ(x.sizes(), y.sizes()) << a[i].key();
    // Excess over the allowed error, relative to it: > 1 fails.
    const double excess =
        ((x - y).abs() / (atol + rtol * y.abs())).max().item<double>();
    if (std::isnan(excess) || excess > worst) {
      worst = excess;
      worst_name = a[i].key();
    }
  }
  EXPECT_FALSE(std::isnan(worst) || worst > 1.0) << what << ": parameter " << worst_name << " differs by "
                        << worst << "x the tolerance (rtol " << rtol << ", atol " << atol << ")";
}

void ExpectParamsEqual(torch::nn::Module& m, torch::nn::Module& ref, const std::string& what) {
  auto a = m.named_parameters(true);
  auto b = ref.named_parameters(true);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].value().detach().to(torch::kCPU),
                             b[i].value().detach().to(torch::kCPU)))
        << what << ": " << a[i].key();
  }
}

Batch RandomBatch(int64_t n) {
  return Batch{torch::randn({n, 1, 28, 28}), torch::randint(0, 10, {n}, torch::kLong)};
}

// Runs the wrapped model's forward under autocast (device type `device`,
// dtype bfloat16) and returns float32 logits, as
//   with torch.autocast(device, dtype=torch.bfloat16): out = model(x)
// does in Python: the loss and the backward pass run outside autocast, and
// the cast cache is cleared on leaving, so no stale bf16 copy of a weight
// outlives an optimizer step.
class AutocastBf16Impl : public torch::nn::Module {
 public:
  AutocastBf16Impl(torch::nn::Sequential inner, c10::DeviceType device)
      : inner_(register_module("inner", std::move(inner))), device_(device) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const bool was_enabled = at::autocast::is_autocast_enabled(device_);
    const at::ScalarType was_dtype = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::increment_nesting();
    auto leave = [&] {
      if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
      at::autocast::set_autocast_enabled(device_, was_enabled);
      at::autocast::set_autocast_dtype(device_, was_dtype);
    };
    torch::Tensor y;
    try {
      y = inner_->forward(x);
    } catch (...) {
      leave();
      throw;
    }
    leave();
    if (y.scalar_type() == at::kBFloat16) ++bf16_forwards_;
    return y.to(torch::kFloat32);
  }

  // Forward passes whose logits came out in bfloat16 (autocast was in effect).
  int64_t bf16_forwards() const { return bf16_forwards_; }

 private:
  torch::nn::Sequential inner_;
  c10::DeviceType device_;
  int64_t bf16_forwards_ = 0;
};
TORCH_MODULE(AutocastBf16);

// ------------------------------------------------------------------ tests

// NCCL's bootstrap interface is the one facing MASTER_ADDR (runs without a
// GPU: it is the environment NCCL will read).
TEST(NcclTest, SocketInterfaceIsTheOneFacingTheMaster) {
  unsetenv("NCCL_SOCKET_IFNAME");
  ASSERT_TRUE(PinNcclSocketInterface("127.0.0.1").ok());
  ASSERT_NE(std::getenv("NCCL_SOCKET_IFNAME"), nullptr);
  EXPECT_EQ(std::string(std::getenv("NCCL_SOCKET_IFNAME")), "=lo");
  // An operator's choice is kept.
  setenv("NCCL_SOCKET_IFNAME", "ib0", 1);
  ASSERT_TRUE(PinNcclSocketInterface("127.0.0.1").ok());
  EXPECT_EQ(std::string(std::getenv("NCCL_SOCKET_IFNAME")), "ib0");
  unsetenv("NCCL_SOCKET_IFNAME");
  absl::Status bad = PinNcclSocketInterface("no-such-master.invalid");
  EXPECT_EQ(bad.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(bad.message().find("no-such-master.invalid"), std::string::npos) << bad;
  EXPECT_EQ(std::getenv("NCCL_SOCKET_IFNAME"), nullptr);
}

TEST(NcclTest, OneRankAllreduceAndDistributedStep) {
  FRAMEWORM_NEED_CUDA();
  auto pg = NcclGroup();
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ((*pg)->getBackendName(), "nccl");
  std::vector<torch::Tensor> t{torch::ones({1024}, torch::kCUDA) * 3};
  (*pg)->allreduce(t)->wait();
  EXPECT_TRUE(t[0].is_cuda());
  EXPECT_EQ(t[0].sum().item<double>(), 3 * 1024);

  torch::manual_seed(0);
  auto model = MakeCnn();
  DistributedOptions d;
  d.backend = "nccl";
  d.process_group = *pg;
  auto trainer = DistributedTrainer::Create(model, Sgd(*model), d);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_TRUE((*trainer)->device().is_cuda());
  EXPECT_FALSE((*trainer)->intra_node_active());
  auto info = (*trainer)->train_step({RandomBatch(32)});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GT(info->loss, 0);
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.is_cuda());
}

// Same initial weights, same batches: one DDP step over NCCL on the GPU
// and one plain step on the CPU leave the same parameters (twice, so the
// momentum buffers are compared too).
TEST(NcclTest, DdpStepOnGpuEqualsCpuStep) {
  FRAMEWORM_NEED_CUDA();
  NoTf32 ieee;
  auto pg = NcclGroup();
  ASSERT_TRUE(pg.ok()) << pg.status();
  torch::manual_seed(0);
  auto cpu_model = MakeCnn();
  torch::manual_seed(0);
  auto gpu_model = MakeCnn();
  ExpectParamsEqual(*gpu_model, *cpu_model, "initial weights");
  Trainer cpu(cpu_model, Sgd(*cpu_model), torch::kCPU);
  DistributedOptions d;
  d.backend = "nccl";
  d.process_group = *pg;
  auto gpu = DistributedTrainer::Create(gpu_model, Sgd(*gpu_model), d);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->device().is_cuda());
  torch::manual_seed(1);
  for (int step = 1; step <= 2; ++step) {
    Batch b = RandomBatch(64);
    auto a = cpu.train_step({b});
    auto g = (*gpu)->train_step({b});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_NEAR(g->loss, a->loss, 1e-5 * std::max(1.0, std::abs(a->loss))) << "step " << step;
    // A near-tie between two logits may flip one prediction, no more.
    EXPECT_LE(std::abs(g->metrics.at("accuracy") - a->metrics.at("accuracy")), 1.0 / 64 + 1e-9) << "step " << step;
    ExpectParamsClose(*gpu_model, *cpu_model, 1e-4, 1e-6, absl::StrCat("after step ", step));
  }
}

// A checkpoint written by the NCCL trainer on the GPU loads into a CPU
// trainer (weights, momentum and position), training goes on identically
// on both, and the CPU's checkpoint loads back onto a GPU.
TEST(NcclTest, CheckpointWrittenOnGpuLoadsOnCpuAndBack) {
  FRAMEWORM_NEED_CUDA();
  NoTf32 ieee;
  auto pg = NcclGroup();
  ASSERT_TRUE(pg.ok()) << pg.status();
  const std::string dir = testutil::MakeTempDir("fw-nccl-ckpt");
  ASSERT_FALSE(dir.empty());
  torch::manual_seed(0);
  auto gpu_model = MakeCnn();
  DistributedOptions d;
  d.backend = "nccl";
  d.process_group = *pg;
  auto gpu = DistributedTrainer::Create(gpu_model, Sgd(*gpu_model), d);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  torch::manual_seed(1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*gpu)->train_step({RandomBatch(64)}).ok());
  const std::string on_gpu = dir + "/written-on-gpu.pt";
  auto info = (*gpu)->save_checkpoint(on_gpu);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GT(info->bytes, 0);

  torch::manual_seed(123);  // other initial weights: the checkpoint must replace them
  auto cpu_model = MakeCnn();
  Trainer cpu(cpu_model, Sgd(*cpu_model), torch::kCPU);
  absl::Status s = cpu.load_checkpoint(on_gpu);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(cpu.state().step, 2);
  for (const auto& p : cpu_model->parameters()) EXPECT_TRUE(p.device().is_cpu());
  ExpectParamsEqual(*cpu_model, *gpu_model, "loaded on the CPU");
  // The momentum buffers came along (to the CPU): the next step agrees.
  Batch b3 = RandomBatch(64);
  auto a = cpu.train_step({b3});
  auto g = (*gpu)->train_step({b3});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectParamsClose(*cpu_model, *gpu_model, 1e-4, 1e-6, "step 3, CPU from the GPU's checkpoint");

  const std::string on_cpu = dir + "/written-on-cpu.pt";
  auto cinfo = cpu.save_checkpoint(on_cpu);
  ASSERT_TRUE(cinfo.ok()) << cinfo.status();
  torch::manual_seed(7);
  auto back_model = MakeCnn();
  Trainer back(back_model, Sgd(*back_model), torch::Device(torch::kCUDA, 0));
  s = back.load_checkpoint(on_cpu);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(back.state().step, 3);
  for (const auto& p : back_model->parameters()) EXPECT_TRUE(p.is_cuda());
  ExpectParamsEqual(*back_model, *cpu_model, "loaded back on the GPU");
  Batch b4 = RandomBatch(64);
  auto c = back.train_step({b4});
  a = cpu.train_step({b4});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectParamsClose(*back_model, *cpu_model, 1e-4, 1e-6, "step 4, GPU from the CPU's checkpoint");
  testutil::RemoveTree(dir);
}

// An asynchronous save's snapshot of GPU state: parameters and momentum in
// pinned host memory (reused, still pinned, by the next snapshot), while
// the optimizer keeps its own GPU tensors; unchanged by the training steps
// that follow it; the file written from it afterwards holds its step,
// momentum included (a CPU trainer loaded from it takes the next step as
// the GPU did).
TEST(NcclTest, SnapshotOfGpuStateIsPinnedAndKeepsItsStep) {
  FRAMEWORM_NEED_CUDA();
  NoTf32 exact;
  const std::string dir = testutil::MakeTempDir("nccl-snapshot");
  torch::manual_seed(3);
  auto gpu_model = MakeCnn();
  auto opt = Sgd(*gpu_model);
  Trainer gpu(gpu_model, opt, torch::Device(torch::kCUDA, 0));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(gpu.train_step({RandomBatch(64)}).ok());
  std::vector<torch::Tensor> at_step2;
  for (const auto& p : gpu_model->parameters()) at_step2.push_back(p.detach().to(torch::kCPU));

  auto momentum = [&] {
    std::vector<torch::Tensor> m;
    for (const auto& kv : opt->state()) {
      m.push_back(static_cast<torch::optim::SGDParamState&>(*kv.second).momentum_buffer());
    }
    return m;
  };
  const std::vector<torch::Tensor> own = momentum();
  ASSERT_FALSE(own.empty());
  CheckpointPosition pos;
  pos.step = 2;
  auto snap = CheckpointSnapshot::Take(*gpu_model, *opt, pos, /*freeze=*/true);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_FALSE((*snap)->serialized_at_take());
  ASSERT_EQ((*snap)->optimizer_tensors().size(), own.size());
  for (const torch::Tensor& t : (*snap)->optimizer_tensors()) {
    EXPECT_TRUE(t.is_cpu() && t.is_pinned()) << "momentum held " << t.device() << ", not pinned host memory";
  }
  const std::vector<torch::Tensor> after = momentum();
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_TRUE(after[i].is_cuda());
    EXPECT_TRUE(after[i].is_same(own[i])) << "the optimizer lost its own momentum tensor " << i;
  }
  ASSERT_EQ((*snap)->params().size(), at_step2.size());
  for (size_t i = 0; i < at_step2.size(); ++i) {
    const torch::Tensor& held = (*snap)->params()[i].second;
    EXPECT_TRUE(held.is_cpu()) << (*snap)->params()[i].first;
    EXPECT_TRUE(held.is_pinned()) << (*snap)->params()[i].first << " is not in pinned memory";
  }
  // Training goes on (step 3) before the snapshot is written.
  const Batch b3 = RandomBatch(64);
  ASSERT_TRUE(gpu.train_step({b3}).ok());
  for (size_t i = 0; i < at_step2.size(); ++i) {
    EXPECT_TRUE(torch::equal((*snap)->params()[i].second, at_step2[i]))
        << "snapshot parameter " << i << " changed after its step";
  }
  const std::string path = dir + "/ckpt-2.pt";
  auto info = (*snap)->WriteTo(path);
  ASSERT_TRUE(info.ok()) << info.status();

  torch::manual_seed(99);
  auto cpu_model = MakeCnn();
  Trainer cpu(cpu_model, Sgd(*cpu_model), torch::kCPU);
  absl::Status s = cpu.load_checkpoint(path);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(cpu.state().step, 2);
  auto loaded = cpu_model->parameters();
  for (size_t i = 0; i < at_step2.size(); ++i) {
    EXPECT_TRUE(torch::equal(loaded[i].detach(), at_step2[i])) << "loaded parameter " << i;
  }
  ASSERT_TRUE(cpu.train_step({b3}).ok());
  ExpectParamsClose(*cpu_model, *gpu_model, 1e-4, 1e-6, "step 3 from the snapshot of step 2");

  // The next snapshot reuses the first one's pinned memory.
  pos.step = 3;
  auto next = CheckpointSnapshot::Take(*gpu_model, *opt, pos, true, std::move(*snap));
  ASSERT_TRUE(next.ok()) << next.status();
  auto now = gpu_model->parameters();
  for (size_t i = 0; i < now.size(); ++i) {
    const torch::Tensor& held = (*next)->params()[i].second;
    EXPECT_TRUE(held.is_pinned()) << "recycled parameter " << i << " is not pinned";
    EXPECT_TRUE(torch::equal(held, now[i].detach().to(torch::kCPU))) << "parameter " << i;
  }
  testutil::RemoveTree(dir);
}

// The autocast wrapper itself (runs everywhere, on the CPU): bf16 inside,
// float32 out, autocast state restored, float32 gradients.
TEST(NcclTest, AutocastWrapperRunsForwardInBf16OnCpu) {
  torch::manual_seed(0);
  auto net = MakeMlp();
  AutocastBf16 wrapped(net, c10::DeviceType::CPU);
  torch::Tensor x = torch::randn({8, 1, 28, 28});
  torch::Tensor y = wrapped->forward(x);
  EXPECT_EQ(y.scalar_type(), torch::kFloat32);
  EXPECT_EQ(wrapped->bf16_forwards(), 1);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(net->forward(x).scalar_type(), torch::kFloat32);
  torch::nn::functional::cross_entropy(y, torch::randint(0, 10, {8}, torch::kLong)).backward();
  for (const auto& p : net->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);
  }
}

// bf16 autocast training (forward in bfloat16, float32 weights, loss and
// gradients) through the NCCL trainer reaches the same Fashion-MNIST test
// accuracy as float32 within 0.5 points: same initial weights, same data
// order, 3 epochs at lr 0.05 then one at 0.005 (the last epoch settles the
// accuracy, so the comparison is not at the mercy of one noisy epoch).
TEST(NcclTest, Bf16AutocastTrainingReachesFp32Accuracy) {
  FRAMEWORM_NEED_CUDA();
  auto train_set = LoadFashionMnist(DataDir(), "train");
  ASSERT_TRUE(train_set.ok()) << train_set.status() << " (set FRAMEWORM_DATA_DIR)";
  auto test_set = LoadFashionMnist(DataDir(), "test");
  ASSERT_TRUE(test_set.ok()) << test_set.status();
  auto pg = NcclGroup();
  ASSERT_TRUE(pg.ok()) << pg.status();
  constexpr int kEpochs = 3;

  struct Outcome {
    double accuracy = 0;
    int64_t bf16_forwards = 0;
    double seconds = 0;
  };
  auto run = [&](bool bf16) -> absl::StatusOr<Outcome> {
    const auto t0 = std::chrono::steady_clock::now();
    torch::manual_seed(0);
    auto net = MakeCnn();
    AutocastBf16 wrapped(net, c10::DeviceType::CUDA);
    Model model = bf16 ? Model(wrapped) : Model(net);
    DataLoader train(*train_set, DataLoaderOptions{128, true, 0, false});
    DataLoader test(*test_set, DataLoaderOptions{1000, false, 0, false});
    TrainerState state;
    for (double lr : {0.05, 0.005}) {
      DistributedOptions d;
      d.backend = "nccl";
      d.process_group = *pg;
      d.trainer.verbose = false;
      d.trainer.epochs = lr > 0.01 ? kEpochs : kEpochs + 1;
      auto t = DistributedTrainer::Create(model, Sgd(*net, lr), d);
      if (!t.ok()) return t.status();
      (*t)->mutable_state() = state;
      if (absl::Status s = (*t)->train(train, test); !s.ok()) return s;
      state = (*t)->state();
    }
    Outcome o;
    o.accuracy = state.val_metrics["accuracy"];
    o.bf16_forwards = wrapped->bf16_forwards();
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
  };
  auto fp32 = run(false);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  auto bf16 = run(true);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  std::cout << "fp32: test accuracy " << 100 * fp32->accuracy << "% in " << fp32->seconds
            << " s; bf16 autocast: " << 100 * bf16->accuracy << "% in " << bf16->seconds
            << " s (" << bf16->bf16_forwards << " forward passes in bf16)" << std::endl;
  EXPECT_EQ(fp32->bf16_forwards, 0);
  // Autocast was really on: every training and evaluation forward was bf16.
  EXPECT_GT(bf16->bf16_forwards, (kEpochs + 1) * 60000 / 128);
  EXPECT_GE(fp32->accuracy, 0.88) << "fp32 training did not learn";
  EXPECT_LE(std::abs(bf16->accuracy - fp32->accuracy), 0.005)
      << "bf16 " << bf16->accuracy << " vs fp32 " << fp32->accuracy;
}

}  // namespace
}  // namespace frameworm
