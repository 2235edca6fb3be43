// DDP semantics over real Gloo process groups on 127.0.0.1: ranks are real
// processes started by launch_distributed (re-executing this test binary
// with a --gtest_filter for the current test).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "train/launch.h"
#include "train/process_group.h"
#include "train/test_util.h"
#include "train/trainer.h"

namespace frameworm {
namespace {

namespace nn = torch::nn;

std::vector<std::string> SelfArgs() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return {"/proc/self/exe",
          std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name()};
}

// Runs fn as ranks 0 and 1 of this test (see the file comment).
absl::Status LaunchTwoRanks(const std::function<int(int, int)>& fn) {
  LaunchOptions lo;
  lo.nprocs = 2;
  lo.argv = SelfArgs();
  return launch_distributed(fn, lo);
}

std::string OutDir() {
  const char* d = std::getenv("FRAMEWORM_TEST_OUT");
  return d ? d : "";
}

std::string MakeOutDir(const std::string& name) {
  std::string dir = testutil::MakeTempDir(name);
  ::setenv("FRAMEWORM_TEST_OUT", dir.c_str(), 1);
  return dir;
}

nn::Sequential SmallNet() {
  return nn::Sequential(nn::Flatten(), nn::Linear(16, 32), nn::ReLU(),
                        nn::Linear(32, 32), nn::ReLU(), nn::Linear(32, 4));
}

Batch GlobalBatch(int64_t n, int step) {
  torch::manual_seed(1000 + step);
  Batch b{torch::randn({n, 16}), torch::randint(0, 4, {n}, torch::kLong)};
  return b;
}

constexpr int kSteps = 5;
constexpr int64_t kPerRank = 8;

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> OneRankGroup() {
  auto port = PickFreePort();
  if (!port.ok()) return port.status();
  ProcessGroupOptions o;
  o.master_port = *port;
  return CreateProcessGroup(o);
}

// Both gradient paths: the intra-node shm allreduce (the default for Gloo
// with every rank local) and Gloo's asynchronous allreduces from the hooks.
void TwoRanksMatchSingleProcess(bool shm) {
  const std::string out = IsLaunchedChild() ? OutDir() : MakeOutDir("ddp");
  auto fn = [shm](int rank, int world) -> int {
    torch::set_num_threads(1);
    torch::manual_seed(100 + rank);  // different weights: broadcast must fix
    auto model = SmallNet();
    auto opt = std::make_shared<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    DistributedOptions o;
    o.backend = "gloo";
    o.bucket_cap_mb = 0.002;  // ~2 KB: several buckets
    o.intra_node_shm = shm;
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 10;
    }
    if ((*t)->intra_node_active() != shm) return 16;
    if (shm && (*t)->reducer().intra_node_buckets() !=
                   static_cast<int>((*t)->reducer().bucket_params().size())) {
      return 17;
    }
    // The gradients fit the shared region: every bucket is summed in place.
    if (shm && (*t)->reducer().shared_buckets() != (*t)->reducer().intra_node_buckets()) return 19;
    if ((*t)->reducer().bucket_params().size() < 3) return 11;
    // A sampler made without a rank takes the process group's, as torch's.
    DistributedSampler sampler(101);
    if (sampler.rank() != rank || sampler.world_size() != world || sampler.num_samples() != 51) {
      return 21;
    }
    for (int s = 0; s < kSteps; ++s) {
      Batch g = GlobalBatch(kPerRank * world, s);
      Batch mine{g.data.narrow(0, rank * kPerRank, kPerRank),
                 g.target.narrow(0, rank * kPerRank, kPerRank)};
      auto info = (*t)->train_step({mine});
      if (!info.ok()) {
        std::cerr << info.status() << std::endl;
        return 12;
      }
      auto order = (*t)->reducer().last_launch_order();
      for (size_t i = 0; i < order.size(); ++i) {
        if (order[i] != static_cast<int>(i)) return 13;
      }
      if (order.size() != (*t)->reducer().bucket_params().size()) return 14;
      if (shm) {
        // Summed in Finalize, after backward.
        if ((*t)->reducer().last_launched_during_backward() != 0) return 15;
      } else {
        // Communication overlapped backward: buckets launched from the hooks.
        if ((*t)->reducer().last_launched_during_backward() < 1) return 15;
      }
    }
    std::vector<torch::Tensor> params;
    for (auto& p : model->parameters()) params.push_back(p.detach().clone());
    torch::save(params, OutDir() + "/rank" + std::to_string(rank) + ".pt");
    // The averaged gradients (in shared memory on the shm path) stay
    // readable after the trainer and its allreduce are gone.
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    const FlightRecorder* rec = (*t)->flight_recorder();
    if (rec == nullptr) return 18;
    const FlightRecorder::Snapshot snap = rec->Take(rec->capacity());
    t->reset();
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!torch::equal(model->parameters()[i].grad(), grads[i])) return 20;
    }
    // The flight recorder's view of this rank's collectives, times left out.
    std::ofstream f(OutDir() + "/collectives" + std::to_string(rank) + ".txt");
    f << snap.enqueued << " " << snap.completed << "\n";
    for (const CollectiveRecord& r : snap.recent) {
      f << r.seq << " " << r.op << " " << r.what << " " << r.bucket << " " << r.bytes << " "
        << CollectiveStateName(r.state) << " "
        << (r.enqueued_ns <= r.started_ns && r.started_ns <= r.ended_ns ? "in-order" : "out-of-order")
        << "\n";
    }
    return 0;
  };
  absl::Status s = LaunchTwoRanks(fn);
  ASSERT_TRUE(s.ok()) << s;

  // Sequence number s is the same collective on both ranks: same op, same
  // payload, every one completed, times in order; the gradient buckets of
  // every step are there (through the shm path or Gloo).
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string c0 = slurp(out + "/collectives0.txt");
  const std::string c1 = slurp(out + "/collectives1.txt");
  EXPECT_EQ(c0, c1);
  const std::string grad = shm ? " allreduce(shm) gradients " : " allreduce gradients ";
  int grads = 0;
  for (size_t at = c0.find(grad); at != std::string::npos; at = c0.find(grad, at + 1)) ++grads;
  EXPECT_GE(grads, 3 * kSteps) << c0;
  EXPECT_NE(c0.find(" broadcast parameters -1 "), std::string::npos) << c0;
  EXPECT_EQ(c0.find(" enqueued "), std::string::npos) << c0;
  EXPECT_EQ(c0.find(" failed "), std::string::npos) << c0;
  EXPECT_EQ(c0.find("out-of-order"), std::string::npos) << c0;
  int64_t enqueued = 0, completed = 0;
  std::istringstream(c0) >> enqueued >> completed;
  EXPECT_EQ(enqueued, completed) << c0;
  EXPECT_GT(enqueued, grads) << c0;

  std::vector<torch::Tensor> r0, r1;
  torch::load(r0, out + "/rank0.pt");
  torch::load(r1, out + "/rank1.pt");
  // Reference: one process, the concatenated global batch, rank 0's init.
  torch::manual_seed(100);
  auto model = SmallNet();
  auto opt = std::make_shared<torch::optim::SGD>(
      model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Trainer ref(model, opt);
  for (int s2 = 0; s2 < kSteps; ++s2) {
    auto info = ref.train_step({GlobalBatch(kPerRank * 2, s2)});
    ASSERT_TRUE(info.ok()) << info.status();
  }
  auto rp = model->parameters();
  ASSERT_EQ(r0.size(), rp.size());
  for (size_t i = 0; i < rp.size(); ++i) {
    EXPECT_TRUE(torch::equal(r0[i], r1[i])) << "ranks differ in parameter " << i;
    const double rel = ((r0[i] - rp[i]).abs().max() /
                        rp[i].abs().max().clamp_min(1e-12)).item<double>();
    EXPECT_LE(rel, 1e-5) << "parameter " << i;
  }
  testutil::RemoveTree(out);
}

TEST(DdpTest, TwoRanksMatchSingleProcessOnGlobalBatch) { TwoRanksMatchSingleProcess(true); }
TEST(DdpTest, TwoRanksMatchSingleProcessOverGloo) { TwoRanksMatchSingleProcess(false); }

// /dev/shm too small for the gradients but not for the slots (a 1.5 MiB
// tmpfs in a private mount namespace, as in a container with a small
// /dev/shm): the shm path still runs, copying through its slots, rank 0
// says so, and the ranks agree. The test re-runs itself under unshare -m
// (root, as CI has); if that is impossible it fails saying why.
TEST(DdpTest, GradientsThatDoNotFitDevShmGoThroughTheSlots) {
  if (std::getenv("FRAMEWORM_SMALL_SHM") == nullptr) {
    const std::string dir = testutil::MakeTempDir("smallshm");
    const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::string cmd =
        "unshare -m --propagation private sh -c 'mount -t tmpfs -o size=1536k "
        "frameworm-small-shm /dev/shm && FRAMEWORM_SMALL_SHM=1 exec " + exe +
        " --gtest_filter=DdpTest.GradientsThatDoNotFitDevShmGoThroughTheSlots' > " + dir +
        "/log 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream f(dir + "/log");
    const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_EQ(rc, 0) << "a private mount namespace with a small /dev/shm is needed (root and "
                        "unshare(1)); the run said:\n" << log;
    EXPECT_NE(log.find("copying them through its slots"), std::string::npos) << log;
    EXPECT_NE(log.find("[  PASSED  ] 1 test"), std::string::npos) << log;
    testutil::RemoveTree(dir);
    return;
  }
  auto fn = [](int rank, int world) -> int {
    torch::set_num_threads(1);
    torch::manual_seed(3);
    nn::Linear model(512, 512);  // 1.05 MB of gradients per rank
    auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                   torch::optim::SGDOptions(0.1));
    DistributedOptions o;
    o.backend = "gloo";
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 10;
    }
    if (!(*t)->intra_node_active()) return 11;
    if ((*t)->reducer().intra_node_buckets() < 1 || (*t)->reducer().shared_buckets() != 0) return 12;
    for (int s = 0; s < 2; ++s) {
      torch::manual_seed(50 + s);
      Batch g{torch::randn({8 * world, 512}), torch::randint(0, 512, {8 * world}, torch::kLong)};
      auto info = (*t)->train_step({Batch{g.data.narrow(0, rank * 8, 8),
                                          g.target.narrow(0, rank * 8, 8)}});
      if (!info.ok()) {
        std::cerr << info.status() << std::endl;
        return 13;
      }
    }
    // The ranks hold the same weights: sum them over both and compare.
    std::vector<torch::Tensor> w{model->weight.detach().clone()};
    std::vector<torch::Tensor> sum{w[0].clone()};
    (*t)->process_group()->allreduce(sum)->wait();
    if (!torch::equal(sum[0], w[0] * world)) return 14;
    return 0;
  };
  absl::Status s = LaunchTwoRanks(fn);
  EXPECT_TRUE(s.ok()) << s;
}

// The shm setup fails on every rank (its store rendezvous goes to a port
// nobody listens on): the trainer falls back to Gloo and still trains.
TEST(DdpTest, ShmSetupFailureFallsBackToGloo) {
  auto fn = [](int rank, int world) -> int {
    torch::set_num_threads(1);
    if (!setup_distributed("gloo").ok()) return 10;
    ::setenv("MASTER_PORT", "1", 1);  // read again by the shm rendezvous only
    auto model = SmallNet();
    auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                   torch::optim::SGDOptions(0.1));
    DistributedOptions o;
    o.timeout = std::chrono::milliseconds(1000);
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 11;
    }
    if ((*t)->intra_node_active()) return 12;
    Batch g = GlobalBatch(kPerRank * world, 0);
    auto info = (*t)->train_step({Batch{g.data.narrow(0, rank * kPerRank, kPerRank),
                                        g.target.narrow(0, rank * kPerRank, kPerRank)}});
    if (!info.ok()) return 13;
    if ((*t)->reducer().last_launch_order().size() != (*t)->reducer().bucket_params().size()) {
      return 14;
    }
    cleanup_distributed();
    return 0;
  };
  absl::Status s = LaunchTwoRanks(fn);
  EXPECT_TRUE(s.ok()) << s;
}

// A model whose "branch" is used only on rank 0 and whose "never" module is
// used nowhere.
struct BranchNetImpl : nn::Module {
  BranchNetImpl()
      : fc1(register_module("fc1", nn::Linear(16, 8))),
        branch(register_module("branch", nn::Linear(16, 8))),
        never(register_module("never", nn::Linear(16, 8))),
        fc2(register_module("fc2", nn::Linear(8, 4))) {}
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor h = fc1->forward(x);
    if (use_branch) h = h + branch->forward(x);
    return fc2->forward(torch::relu(h));
  }
  nn::Linear fc1, branch, never, fc2;
  bool use_branch = true;
};
TORCH_MODULE(BranchNet);

TEST(DdpTest, FindUnusedParametersAveragesWithZerosAndFinishes) {
  const std::string out = IsLaunchedChild() ? OutDir() : MakeOutDir("unused");
  auto fn = [](int rank, int world) -> int {
    torch::set_num_threads(1);
    torch::manual_seed(7);
    BranchNet model;
    model->use_branch = rank == 0;
    auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                   torch::optim::SGDOptions(0.0));
    DistributedOptions o;
    o.backend = "gloo";
    o.find_unused_parameters = true;
    o.bucket_cap_mb = 0.0005;
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) return 10;
    Batch g = GlobalBatch(kPerRank * world, 0);
    Batch mine{g.data.narrow(0, rank * kPerRank, kPerRank),
               g.target.narrow(0, rank * kPerRank, kPerRank)};
    for (int i = 0; i < 2; ++i) {  // twice: the hooks re-arm cleanly
      auto info = (*t)->train_step({mine});
      if (!info.ok()) {
        std::cerr << info.status() << std::endl;
        return 12;
      }
    }
    if (model->never->weight.grad().defined()) return 13;
    std::vector<torch::Tensor> grads = {model->fc1->weight.grad(),
                                        model->branch->weight.grad(),
                                        model->branch->bias.grad(),
                                        model->fc2->weight.grad()};
    torch::save(grads, OutDir() + "/grads" + std::to_string(rank) + ".pt");
    return 0;
  };
  absl::Status s = LaunchTwoRanks(fn);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<torch::Tensor> g0, g1;
  torch::load(g0, out + "/grads0.pt");
  torch::load(g1, out + "/grads1.pt");
  // Reference: each rank's local gradients, averaged by hand.
  std::vector<torch::Tensor> expect(4);
  Batch g = GlobalBatch(kPerRank * 2, 0);
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(7);
    BranchNet m;
    m->use_branch = r == 0;
    auto loss = torch::nn::functional::cross_entropy(
        m->forward(g.data.narrow(0, r * kPerRank, kPerRank)),
        g.target.narrow(0, r * kPerRank, kPerRank));
    loss.backward();
    std::vector<torch::Tensor> local = {
        m->fc1->weight.grad(),
        m->branch->weight.grad().defined() ? m->branch->weight.grad()
                                           : torch::zeros_like(m->branch->weight),
        m->branch->bias.grad().defined() ? m->branch->bias.grad()
                                         : torch::zeros_like(m->branch->bias),
        m->fc2->weight.grad()};
    for (int i = 0; i < 4; ++i) expect[i] = expect[i].defined() ? expect[i] + local[i] / 2 : local[i] / 2;
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(torch::allclose(g0[i], expect[i], 1e-5, 1e-7))
        << "grad " << i << "\n" << g0[i].sum() << "\n" << g1[i].sum() << "\n" << expect[i].sum();
    EXPECT_TRUE(torch::equal(g0[i], g1[i])) << "grad " << i;
  }
  EXPECT_GT(expect[1].abs().sum().item<double>(), 0);
  testutil::RemoveTree(out);
}

// A world of one exchanges nothing (no collective per bucket, no averaging
// by 1): the step is bit-identical to the plain Trainer's, with and without
// find_unused_parameters.
TEST(DdpTest, WorldOfOneEqualsThePlainTrainerExactly) {
  for (bool find_unused : {false, true}) {
    auto pg = OneRankGroup();
    ASSERT_TRUE(pg.ok()) << pg.status();
    torch::manual_seed(3);
    auto model = SmallNet();
    auto opt = std::make_shared<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    DistributedOptions o;
    o.process_group = *pg;
    o.bucket_cap_mb = 0.002;
    o.find_unused_parameters = find_unused;
    auto t = DistributedTrainer::Create(model, opt, o);
    ASSERT_TRUE(t.ok()) << t.status();
    torch::manual_seed(3);
    auto ref_model = SmallNet();
    auto ref_opt = std::make_shared<torch::optim::SGD>(
        ref_model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    Trainer ref(ref_model, ref_opt);
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE((*t)->train_step({GlobalBatch(kPerRank, s)}).ok());
      ASSERT_TRUE(ref.train_step({GlobalBatch(kPerRank, s)}).ok());
    }
    auto a = model->parameters(), b = ref_model->parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
    EXPECT_EQ((*t)->reducer().last_launch_order().size(),
              (*t)->reducer().bucket_params().size());
  }
}

TEST(DdpTest, UnusedParameterWithoutOptionIsNamedError) {
  auto pg = OneRankGroup();
  ASSERT_TRUE(pg.ok()) << pg.status();
  torch::manual_seed(7);
  BranchNet model;
  model->use_branch = false;
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.1));
  DistributedOptions o;
  o.process_group = *pg;
  auto t = DistributedTrainer::Create(model, opt, o);
  ASSERT_TRUE(t.ok()) << t.status();
  auto info = (*t)->train_step({GlobalBatch(4, 0)});
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(info.status().message().find("branch.weight"), std::string::npos) << info.status();
  EXPECT_NE(info.status().message().find("never.bias"), std::string::npos) << info.status();
  EXPECT_NE(info.status().message().find("find_unused_parameters"), std::string::npos);
}

TEST(DdpTest, GradientAccumulationSyncsOnlyOnLastMicroBatch) {
  auto pg = OneRankGroup();
  ASSERT_TRUE(pg.ok()) << pg.status();
  torch::manual_seed(3);
  auto model = SmallNet();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.1));
  DistributedOptions o;
  o.process_group = *pg;
  o.gradient_accumulation_steps = 2;
  auto t = DistributedTrainer::Create(model, opt, o);
  ASSERT_TRUE(t.ok()) << t.status();
  Batch g = GlobalBatch(8, 0);
  auto info = (*t)->train_step({Batch{g.data.narrow(0, 0, 4), g.target.narrow(0, 0, 4)},
                                Batch{g.data.narrow(0, 4, 4), g.target.narrow(0, 4, 4)}});
  ASSERT_TRUE(info.ok()) << info.status();
  // One synchronisation: every bucket launched exactly once.
  EXPECT_EQ((*t)->reducer().last_launch_order().size(),
            (*t)->reducer().bucket_params().size());
  // Equals one step on the whole batch.
  torch::manual_seed(3);
  auto ref_model = SmallNet();
  auto ref_opt = std::make_shared<torch::optim::SGD>(ref_model->parameters(),
                                                     torch::optim::SGDOptions(0.1));
  Trainer ref(ref_model, ref_opt);
  ASSERT_TRUE(ref.train_step({g}).ok());
  auto a = model->parameters(), b = ref_model->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6));
}

// Options for the step-action tests: rank 0 answers checkpoint at step 3
// and stop at 5, rank 1 checkpoint at 1 and stop at 2; the actions taken
// ("<step>c", "<step>s", "<step>cs") go to *acted.
DistributedOptions StepActionOptions(int rank, bool shm, std::vector<std::string>* acted) {
  DistributedOptions o;
  o.backend = "gloo";
  o.intra_node_shm = shm;
  o.trainer.sync_step_actions = true;
  o.trainer.checkpoint_dir = OutDir() + "/ckpt";
  o.trainer.on_step = [rank](const StepInfo& info) -> absl::StatusOr<StepAction> {
    StepAction a;
    a.checkpoint = info.step == (rank == 0 ? 3 : 1);
    a.stop = info.step == (rank == 0 ? 5 : 2);
    return a;
  };
  o.trainer.on_action = [acted](const StepInfo& info, const StepAction& a) {
    acted->push_back(absl::StrCat(info.step, a.checkpoint ? "c" : "", a.stop ? "s" : ""));
  };
  return o;
}

// Trains `t` for an epoch of `per_rank` random samples per rank in batches
// of `batch`; the error on stderr and false when it fails.
bool TrainOnRandomData(DistributedTrainer& t, int64_t per_rank, int64_t batch, int world) {
  Dataset d{torch::randn({per_rank * world, 16}), torch::randint(0, 4, {per_rank * world}, torch::kLong), {}};
  DataLoaderOptions lo;
  lo.batch_size = batch;
  DataLoader train(d, lo), val(d, lo);
  if (absl::Status s = t.train(train, val); !s.ok()) {
    std::cerr << s << std::endl;
    return false;
  }
  return true;
}

// Step-action broadcasts the flight recorder saw complete.
int StepActionBroadcasts(const DistributedTrainer& t) {
  int n = 0;
  for (const auto& r : t.flight_recorder()->Take(256).recent) {
    if (std::string(r.what) == "step action" && r.state == CollectiveState::kCompleted) ++n;
  }
  return n;
}

// sync_step_actions: rank 0's answer is every rank's, on both paths (the
// intra-node shared memory and Gloo): rank 1 asks to stop at step 2 and to
// checkpoint at step 1, rank 0 to checkpoint at step 3 and stop at step 5;
// both ranks checkpoint at 3 and stop after step 5, and each step's
// broadcast is in the flight recorder.
void StepActionsAreRank0s(bool shm) {
  const std::string out = IsLaunchedChild() ? OutDir() : MakeOutDir("actions");
  auto fn = [shm](int rank, int world) -> int {
    torch::set_num_threads(1);
    torch::manual_seed(7);
    auto model = SmallNet();
    auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
    std::vector<std::string> acted;
    DistributedOptions o = StepActionOptions(rank, shm, &acted);
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 10;
    }
    if ((*t)->intra_node_active() != shm) return 11;
    if (!TrainOnRandomData(**t, 64, 4, world)) return 12;
    if ((*t)->state().step != 5) {
      std::cerr << "rank " << rank << " stopped at step " << (*t)->state().step << std::endl;
      return 13;
    }
    if (acted != std::vector<std::string>{"3c", "5s"}) {
      std::cerr << "rank " << rank << " acted at " << absl::StrJoin(acted, ",") << std::endl;
      return 15;
    }
    const int broadcasts = StepActionBroadcasts(**t);
    if (broadcasts != 5) {
      std::cerr << "rank " << rank << ": " << broadcasts << " step-action broadcasts recorded" << std::endl;
      return 14;
    }
    return 0;
  };
  absl::Status s = LaunchTwoRanks(fn);
  ASSERT_TRUE(s.ok()) << s;
  if (IsLaunchedChild()) return;
  EXPECT_TRUE(std::filesystem::exists(out + "/ckpt/ckpt-3.pt"));
  EXPECT_FALSE(std::filesystem::exists(out + "/ckpt/ckpt-1.pt"));
  testutil::RemoveTree(out);
}

TEST(DdpTest, StepActionsAreRank0sThroughSharedMemory) { StepActionsAreRank0s(true); }
TEST(DdpTest, StepActionsAreRank0sThroughGloo) { StepActionsAreRank0s(false); }

// Spaced step-action broadcasts (step_action_sync_share): over Gloo a
// broadcast costs far more than 0.1% of this tiny model's step, so they
// come at most 200 ms of steps apart; rank 0's answers (checkpoint at 3,
// stop at 5) wait for the next one, and both ranks act at the same later
// steps (rank 1's own answers are never acted on).
TEST(DdpTest, SpacedStepActionsAreActedOnTogetherLater) {
  const std::string out = IsLaunchedChild() ? OutDir() : MakeOutDir("spaced");
  auto fn = [](int rank, int world) -> int {
    torch::set_num_threads(1);
    torch::manual_seed(7);
    auto model = SmallNet();
    auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
    std::vector<std::string> acted;
    DistributedOptions o = StepActionOptions(rank, /*shm=*/false, &acted);
    o.trainer.step_action_sync_share = 0.001;
    // 200 ms: on a slow, loaded host a step can take 20 ms, and a delay
    // that fits only one step would broadcast at every step.
    o.trainer.step_action_max_delay_seconds = 0.2;
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 10;
    }
    // 20,000 steps per rank, far more than fit in 200 ms.
    if (!TrainOnRandomData(**t, 20000, 1, world)) return 12;
    const int broadcasts = StepActionBroadcasts(**t);
    std::ofstream(OutDir() + "/rank" + std::to_string(rank) + ".txt")
        << absl::StrJoin(acted, ",") << " " << (*t)->state().step << " " << broadcasts;
    return 0;
  };
  absl::Status s = LaunchTwoRanks(fn);
  ASSERT_TRUE(s.ok()) << s;
  if (IsLaunchedChild()) return;
  auto read = [&](int r) {
    std::ifstream f(out + "/rank" + std::to_string(r) + ".txt");
    std::string acted;
    int64_t step = 0, broadcasts = 0;
    f >> acted >> step >> broadcasts;
    return std::make_tuple(acted, step, broadcasts);
  };
  const auto [acted0, step0, broadcasts0] = read(0);
  const auto [acted1, step1, broadcasts1] = read(1);
  EXPECT_EQ(acted0, acted1);
  EXPECT_EQ(step0, step1);
  EXPECT_EQ(broadcasts0, broadcasts1);
  // Stopped at rank 0's request, at step 5 or later, long before the end.
  EXPECT_GE(step0, 5);
  EXPECT_LT(step0, 20000);
  // The broadcasts were spaced: fewer than the steps.
  EXPECT_GE(broadcasts0, 1);
  EXPECT_LT(broadcasts0, step0) << acted0;
  // The checkpoint at step 3 or later, at or before the stop; the stop last.
  const std::vector<std::string> parts = absl::StrSplit(acted0, ',');
  ASSERT_GE(parts.size(), 1u) << acted0;
  ASSERT_LE(parts.size(), 2u) << acted0;
  const std::string& last = parts.back();
  EXPECT_EQ(last, absl::StrCat(step0, parts.size() == 1 ? "cs" : "s")) << acted0;
  int64_t checkpoint_step = 0;
  ASSERT_TRUE(absl::SimpleAtoi(parts[0].substr(0, parts[0].find_first_not_of("0123456789")), &checkpoint_step));
  EXPECT_GE(checkpoint_step, 3) << acted0;
  EXPECT_TRUE(std::filesystem::exists(absl::StrCat(out, "/ckpt/ckpt-", checkpoint_step, ".pt")));
  EXPECT_FALSE(std::filesystem::exists(out + "/ckpt/ckpt-1.pt"));
  testutil::RemoveTree(out);
}

TEST(DdpTest, BadStepActionSpacingIsAClearError) {
  auto pg = OneRankGroup();
  ASSERT_TRUE(pg.ok()) << pg.status();
  auto model = SmallNet();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  DistributedOptions o;
  o.process_group = *pg;
  auto t = DistributedTrainer::Create(model, opt, o);
  ASSERT_TRUE(t.ok()) << t.status();
  Dataset d{torch::randn({8, 16}), torch::randint(0, 4, {8}, torch::kLong), {}};
  DataLoader train(d, DataLoaderOptions{}), val(d, DataLoaderOptions{});
  (*t)->options().step_action_sync_share = 1.5;
  absl::Status s = (*t)->train(train, val);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("step_action_sync_share"), std::string::npos) << s;
  (*t)->options().step_action_sync_share = 0.01;
  (*t)->options().step_action_max_delay_seconds = 0;
  s = (*t)->train(train, val);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("step_action_max_delay_seconds"), std::string::npos) << s;
  EXPECT_EQ((*t)->state().step, 0) << "nothing trained";
}

// Rank 0 writes checkpoints; every rank loads them. Once wait_for_checkpoint()
// or train() returns on any rank, rank 0's save is durable, so each rank
// may load it at once (a 20 MB file: rank 0's write and fsync take far
// longer than a peer's return); rank 0's failed write is ABORTED on the
// others.
TEST(DdpTest, EveryRankMayLoadRank0sCheckpointOnceTheWaitOrTrainReturns) {
  const std::string out = IsLaunchedChild() ? OutDir() : MakeOutDir("ddp-wait");
  auto fn = [](int rank, int /*world*/) -> int {
    torch::set_num_threads(1);
    torch::manual_seed(7);
    auto model = nn::Sequential(nn::Flatten(), nn::Linear(784, 2048), nn::ReLU(),
                                nn::Linear(2048, 10));
    auto opt = std::make_shared<torch::optim::Adam>(model->parameters(),
                                                    torch::optim::AdamOptions(1e-3));
    DistributedOptions o;
    o.backend = "gloo";
    o.trainer.checkpoint_dir = OutDir() + "/ck";
    o.trainer.checkpoint_every = 3;
    o.trainer.max_steps = 4;  // a final checkpoint at step 4
    o.trainer.verbose = false;
    auto t = DistributedTrainer::Create(model, opt, o);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 10;
    }
    DataLoaderOptions lo;
    lo.batch_size = 16;
    DataLoader train(MakeSyntheticDataset(256, 1), lo);
    DataLoader val(MakeSyntheticDataset(32, 2), lo);
    auto info = (*t)->train_step({train.batch(0)});
    if (!info.ok()) return 11;
    // A write that fails on rank 0: its path lies under a regular file.
    const std::string blocker = OutDir() + "/not-a-dir";
    if (rank == 0) std::ofstream(blocker) << "x";
    if (!(*t)->save_checkpoint_async(blocker + "/ckpt.pt", 1).ok()) return 12;
    absl::Status failed = (*t)->wait_for_checkpoint();
    if (failed.ok()) return 13;
    if (rank != 0 && (failed.code() != absl::StatusCode::kAborted ||
                      failed.message().find("rank 0 failed to write") == std::string::npos)) {
      std::cerr << failed << std::endl;
      return 14;
    }
    const std::string path = OutDir() + "/explicit.pt";
    if (!(*t)->save_checkpoint_async(path, 1).ok()) return 15;
    absl::Status waited = (*t)->wait_for_checkpoint();
    if (!waited.ok()) {
      std::cerr << waited << std::endl;
      return 16;
    }
    if (!std::filesystem::exists(path)) return 17;
    absl::Status loaded = (*t)->load_checkpoint(path);
    if (!loaded.ok()) {
      std::cerr << "rank " << rank << ": " << loaded << std::endl;
      return 18;
    }
    absl::Status trained = (*t)->train(train, val);
    if (!trained.ok()) {
      std::cerr << trained << std::endl;
      return 19;
    }
    const std::string last = OutDir() + "/ck/ckpt-4.pt";
    if ((*t)->state().step != 4 || !std::filesystem::exists(last)) return 20;
    loaded = (*t)->load_checkpoint(last);
    if (!loaded.ok()) {
      std::cerr << "rank " << rank << ": " << loaded << std::endl;
      return 21;
    }
    return 0;
  };
  absl::Status s = LaunchTwoRanks(fn);
  EXPECT_TRUE(s.ok()) << s;
  testutil::RemoveTree(out);
}

// DistributedOptions::timeout reaches the process group it sets up: a rank
// whose peer never comes fails within it, not torch's default.
TEST(DdpTest, TheTimeoutBoundsARendezvousAPeerNeverJoins) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::map<std::string, std::string> env = {{"MASTER_ADDR", "127.0.0.1"},
                                                  {"MASTER_PORT", std::to_string(*port)},
                                                  {"WORLD_SIZE", "2"},
                                                  {"RANK", "0"}};
  auto lookup = [&](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = setup_distributed("gloo", lookup, std::chrono::seconds(2));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(s.ok());
  if (s.ok()) cleanup_distributed();
  // Generous for a loaded machine, and far below the 30-minute default.
  EXPECT_LT(took, 120) << s;
}

TEST(DdpTest, MpiBackendIsAClearError) {
  auto model = SmallNet();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.1));
  DistributedOptions o;
  o.backend = "mpi";
  auto t = DistributedTrainer::Create(model, opt, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("\"mpi\""), std::string::npos);
  EXPECT_NE(t.status().message().find("gloo"), std::string::npos) << t.status();
  o.backend = "bogus";
  t = DistributedTrainer::Create(model, opt, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("bogus"), std::string::npos);
}

TEST(DdpTest, NcclWithoutCudaIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA present";
  ProcessGroupOptions o;
  o.backend = "nccl";
  auto pg = CreateProcessGroup(o);
  ASSERT_FALSE(pg.ok());
  EXPECT_NE(pg.status().message().find("nccl"), std::string::npos) << pg.status();
}

}  // namespace
}  // namespace frameworm
