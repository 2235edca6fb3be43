// Asynchronous checkpoints (TrainerOptions::async_checkpoint, the default):
// the file holds the state of its step although training went on while it
// was written; a writer killed mid-write leaves the previous checkpoint
// loadable and its temporary file is removed; failures end training;
// memory stays bounded over many saves.
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include <torch/torch.h>

#include "train/checkpoint_file.h"
#include "train/checkpoint_snapshot.h"
#include "train/data.h"
#include "train/models.h"
#include "train/test_util.h"
#include "train/trainer.h"
#include "train/trainer_test_rig.h"

namespace frameworm {
namespace {

using testutil::MakeRig;
using testutil::TrainLoader;
using testutil::ValLoader;
using Rig = testutil::TrainRig;

std::vector<torch::Tensor> Copies(const std::vector<torch::Tensor>& v) {
  std::vector<torch::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone());
  return out;
}

// One optimizer step on x (the loss: the mean of the squared outputs).
template <typename M>
void PlainStep(M& model, torch::optim::Optimizer& opt, const torch::Tensor& x) {
  opt.zero_grad();
  model->forward(x).pow(2).mean().backward();
  opt.step();
}

// Every tensor of the optimizer's state, in parameter order.
std::vector<torch::Tensor> OptimizerTensors(Rig& s) {
  std::vector<torch::Tensor> out;
  for (const auto& p : s.model->parameters()) {
    auto& st = *s.opt->state().at(p.unsafeGetTensorImpl());
    if (auto* g = dynamic_cast<torch::optim::SGDParamState*>(&st)) {
      out.push_back(g->momentum_buffer().clone());
    } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(&st)) {
      out.push_back(a->exp_avg().clone());
      out.push_back(a->exp_avg_sq().clone());
      out.push_back(torch::tensor({a->step()}, torch::kLong));
    }
  }
  return out;
}

// Waits (at most 20 s) until training has done `step`; true if it has.
bool WaitForStep(const std::atomic<int64_t>& done_step, int64_t step) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done_step < step && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done_step >= step;
}

long RssKb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// The checkpoint of step 3 is written while training runs steps 4..6: its
// on_checkpoint waits (on the checkpoint thread) until step 6 is done, which
// a synchronous save could never see. Loaded into a fresh trainer it holds
// exactly the parameters and optimizer state of step 3, and training on from
// it equals training on without the interruption.
void CheckpointHoldsItsStep(bool adam) {
  const std::string dir = testutil::MakeTempDir("async-ckpt");
  TrainerOptions o;
  o.max_steps = 8;
  o.checkpoint_dir = dir;
  std::atomic<int64_t> done_step{0};
  std::map<int64_t, std::vector<torch::Tensor>> params_at, opt_at;
  std::vector<int64_t> reported;
  std::atomic<bool> saw_training_go_on{false};
  Rig s = MakeRig(1, o, adam);
  s.trainer->options().on_step = [&](const StepInfo& info) -> absl::StatusOr<StepAction> {
    done_step = info.step;
    StepAction a;
    a.checkpoint = info.step == 3;
    if (a.checkpoint) {
      params_at[3] = Copies(s.model->parameters());
      opt_at[3] = OptimizerTensors(s);
    }
    return a;
  };
  s.trainer->options().on_checkpoint = [&](int64_t step, const std::string&,
                                           const CheckpointFileInfo&) {
    reported.push_back(step);
    saw_training_go_on = WaitForStep(done_step, 6);
  };
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    absl::Status st = s.trainer->train(tl, vl);
    ASSERT_TRUE(st.ok()) << st;
  }
  EXPECT_TRUE(saw_training_go_on) << "training waited for the checkpoint write";
  EXPECT_EQ(reported, std::vector<int64_t>{3});
  const std::vector<torch::Tensor> final_params = Copies(s.model->parameters());

  Rig r = MakeRig(99, o, adam);
  absl::Status loaded = r.trainer->load_checkpoint(dir + "/ckpt-3.pt");
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(r.trainer->state().step, 3);
  auto rp = r.model->parameters();
  for (size_t i = 0; i < rp.size(); ++i) {
    EXPECT_TRUE(torch::equal(rp[i], params_at[3][i])) << "parameter " << i << " not of step 3";
  }
  auto ro = OptimizerTensors(r);
  ASSERT_EQ(ro.size(), opt_at[3].size());
  for (size_t i = 0; i < ro.size(); ++i) {
    EXPECT_TRUE(torch::equal(ro[i], opt_at[3][i])) << "optimizer tensor " << i << " not of step 3";
  }
  r.trainer->options().on_step = nullptr;
  r.trainer->options().on_checkpoint = nullptr;
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    ASSERT_TRUE(r.trainer->train(tl, vl).ok());
  }
  auto rf = r.model->parameters();
  for (size_t i = 0; i < rf.size(); ++i) {
    EXPECT_TRUE(torch::allclose(rf[i], final_params[i], 1e-6, 1e-7)) << "parameter " << i;
  }
  testutil::RemoveTree(dir);
}

TEST(AsyncCheckpointTest, HoldsTheStateOfItsStepWhileTrainingGoesOnSgd) {
  CheckpointHoldsItsStep(/*adam=*/false);
}

TEST(AsyncCheckpointTest, HoldsTheStateOfItsStepWhileTrainingGoesOnAdam) {
  CheckpointHoldsItsStep(/*adam=*/true);
}

// A process killed in the middle of writing ckpt-4 (header place and part of
// the payload on disk: more than one of the writer's 8 MiB buffers, no
// rename) leaves ckpt-2 loadable; the next trainer to checkpoint there
// removes the dead writer's temporary file, whether it saves asynchronously
// or not.
void KilledWriterLeavesThePreviousOneAndNoTempFile(bool next_async) {
  const std::string dir = testutil::MakeTempDir("async-crash");
  TrainerOptions o;
  o.max_steps = 2;
  o.checkpoint_every = 2;
  o.checkpoint_dir = dir;
  Rig s = MakeRig(1, o);
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    ASSERT_TRUE(s.trainer->train(tl, vl).ok());
  }
  const std::string path4 = dir + "/ckpt-4.pt";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto w = CheckpointFileWriter::Open(path4);
    if (!w.ok()) ::_exit(2);
    std::string part(20 << 20, 'x');
    if (!(*w)->Append(part.data(), part.size()).ok()) ::_exit(3);
    // The writer's thread has put at least one buffer in the file.
    const std::string mine = path4 + ".tmp." + std::to_string(::getpid());
    struct stat st {};
    for (int i = 0; i < 500 && (::stat(mine.c_str(), &st) != 0 || st.st_size < (8 << 20)); ++i) {
      ::usleep(10000);
    }
    ::raise(SIGKILL);  // mid-write: no commit, no destructor
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  const std::string temp = path4 + ".tmp." + std::to_string(child);
  struct stat partial {};
  ASSERT_EQ(::stat(temp.c_str(), &partial), 0) << "the killed writer left no partial file to test with";
  EXPECT_GE(partial.st_size, 8 << 20) << "no payload reached the file before the kill";
  EXPECT_FALSE(std::ifstream(path4).good());

  o.async_checkpoint = next_async;
  Rig r = MakeRig(7, o);
  absl::Status loaded = r.trainer->load_checkpoint(dir + "/ckpt-2.pt");
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(r.trainer->state().step, 2);

  // The next trainer's first save cleans up after the dead writer.
  r.trainer->options().max_steps = 4;
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    ASSERT_TRUE(r.trainer->train(tl, vl).ok());
  }
  EXPECT_FALSE(std::ifstream(temp).good()) << temp << " was left behind";
  auto four = ReadCheckpointFile(path4);
  EXPECT_TRUE(four.ok()) << four.status();
  testutil::RemoveTree(dir);
}

TEST(AsyncCheckpointTest, AWriterKilledMidWriteLeavesThePreviousOneAndNoTempFile) {
  KilledWriterLeavesThePreviousOneAndNoTempFile(/*next_async=*/true);
}

TEST(AsyncCheckpointTest, ASynchronousSaverAlsoRemovesADeadWritersTempFile) {
  KilledWriterLeavesThePreviousOneAndNoTempFile(/*next_async=*/false);
}

// A background write that fails (not for a full disk) ends train() with an
// error naming the path, as a synchronous one does.
TEST(AsyncCheckpointTest, AFailedBackgroundWriteEndsTrainingWithTheReason) {
  const std::string base = testutil::MakeTempDir("async-fail");
  const std::string not_a_dir = base + "/file";
  std::ofstream(not_a_dir) << "x";
  for (bool async : {true, false}) {
    TrainerOptions o;
    o.max_steps = 6;
    o.checkpoint_every = 2;
    o.checkpoint_dir = not_a_dir + "/ckpts";
    o.async_checkpoint = async;
    Rig s = MakeRig(1, o);
    auto tl = TrainLoader();
    auto vl = ValLoader();
    absl::Status st = s.trainer->train(tl, vl);
    EXPECT_FALSE(st.ok()) << "async " << async;
    EXPECT_NE(st.message().find(not_a_dir), std::string::npos) << st;
    EXPECT_LT(s.trainer->state().step, 6) << "async " << async << ": training did not stop";
  }
  testutil::RemoveTree(base);
}

// A full disk skips a periodic checkpoint (training goes on) but not the
// final one: the finished model must be kept, so train() fails, in both
// modes (as the synchronous trainer always did).
TEST(AsyncCheckpointTest, AFullDiskSkipsPeriodicCheckpointsButFailsTheFinalOne) {
  for (bool async : {true, false}) {
    const std::string dir = testutil::MakeTempDir("async-full");
    TrainerOptions o;
    o.max_steps = 5;
    o.checkpoint_every = 2;
    o.checkpoint_dir = dir;
    o.async_checkpoint = async;
    std::vector<int64_t> skipped;
    std::mutex mu;
    o.on_checkpoint_skipped = [&](int64_t step, const std::string&) {
      std::lock_guard<std::mutex> l(mu);
      skipped.push_back(step);
    };
    Rig s = MakeRig(1, o);
    absl::Status trained = testutil::TrainWithFullDisk(s);
    EXPECT_EQ(trained.code(), absl::StatusCode::kResourceExhausted) << "async " << async << ": " << trained;
    EXPECT_NE(trained.message().find("final checkpoint of step 5"), std::string::npos) << trained;
    EXPECT_EQ(s.trainer->state().step, 5);
    EXPECT_EQ(skipped, (std::vector<int64_t>{2, 4, 5})) << "async " << async;
    testutil::RemoveTree(dir);
  }
}

// At most one save in flight: 40 saves of a 16 MB model keep the process
// within a few snapshots' worth of memory of where it was after 5.
TEST(AsyncCheckpointTest, MemoryStaysBoundedOverManySaves) {
  const std::string dir = testutil::MakeTempDir("async-mem");
  torch::manual_seed(1);
  auto model = torch::nn::Sequential(torch::nn::Linear(2048, 2048));  // 16 MiB of float
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.01).momentum(0.9));
  TrainerOptions o;
  o.verbose = false;
  o.checkpoint_dir = dir;
  Trainer t(model, opt, torch::kCPU, o);
  // Momentum buffers exist after one step.
  auto loss = model->forward(torch::randn({4, 2048})).sum();
  loss.backward();
  opt->step();
  long rss5 = 0;
  for (int i = 1; i <= 40; ++i) {
    absl::Status s = t.save_checkpoint_async(dir + "/ckpt.pt", i);
    ASSERT_TRUE(s.ok()) << s;
    if (i == 5) rss5 = RssKb();
  }
  ASSERT_TRUE(t.wait_for_checkpoint().ok());
  const long grown_kb = RssKb() - rss5;
  EXPECT_LT(grown_kb, 3 * 32 * 1024) << "RSS grew " << grown_kb << " kB over 35 saves";
  auto last = ReadCheckpointFile(dir + "/ckpt.pt");
  EXPECT_TRUE(last.ok()) << last.status();
  testutil::RemoveTree(dir);
}

// A user's own optimizer (heavy-ball momentum with its own state type),
// which the snapshot cannot hand over.
struct VelocityState : torch::optim::OptimizerCloneableParamState<VelocityState> {
  torch::Tensor velocity;
};

class HeavyBall : public torch::optim::Optimizer {
 public:
  explicit HeavyBall(std::vector<torch::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<torch::optim::SGDOptions>(0.01)) {}
  torch::Tensor step(LossClosure = nullptr) override {
    torch::NoGradGuard ng;
    for (auto& p : param_groups_[0].params()) {
      if (!p.grad().defined()) continue;
      auto& st = state_[p.unsafeGetTensorImpl()];
      if (!st) {
        auto v = std::make_unique<VelocityState>();
        v->velocity = torch::zeros_like(p);
        st = std::move(v);
      }
      auto& v = static_cast<VelocityState&>(*st).velocity;
      v.mul_(0.9).add_(p.grad());
      p.add_(v, -0.01);
    }
    return {};
  }
  void save(torch::serialize::OutputArchive& a) const override {
    const auto& ps = param_groups_[0].params();
    for (size_t i = 0; i < ps.size(); ++i) {
      auto it = state_.find(ps[i].unsafeGetTensorImpl());
      if (it != state_.end()) {
        a.write("v" + std::to_string(i), static_cast<const VelocityState&>(*it->second).velocity);
      }
    }
  }
  void load(torch::serialize::InputArchive& a) override {
    const auto& ps = param_groups_[0].params();
    for (size_t i = 0; i < ps.size(); ++i) {
      auto v = std::make_unique<VelocityState>();
      if (a.try_read("v" + std::to_string(i), v->velocity)) {
        state_[ps[i].unsafeGetTensorImpl()] = std::move(v);
      }
    }
  }
  torch::Tensor velocity(size_t i) {
    return static_cast<VelocityState&>(
               *state_.at(param_groups_[0].params()[i].unsafeGetTensorImpl()))
        .velocity;
  }
};

// Its state is serialized at once (so later steps cannot change the
// snapshot); the file is complete, loadable and holds the state of its step.
TEST(AsyncCheckpointTest, AnUnknownOptimizerIsSerializedAtOnce) {
  const std::string dir = testutil::MakeTempDir("async-custom");
  torch::manual_seed(1);
  auto model = MakeMlp();
  auto opt = std::make_shared<HeavyBall>(model->parameters());
  auto x = torch::randn({8, 784});
  auto one_step = [&] { PlainStep(model, *opt, x); };
  one_step();
  const auto params_then = Copies(model->parameters());
  const torch::Tensor v0_then = opt->velocity(0).clone();
  auto snap = CheckpointSnapshot::Take(*model.ptr(), *opt, CheckpointPosition{0, 1, 1, 1}, true);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_TRUE((*snap)->serialized_at_take());
  one_step();  // training goes on before the write
  ASSERT_FALSE(torch::equal(opt->velocity(0), v0_then));
  auto written = (*snap)->WriteTo(dir + "/ckpt-1.pt");
  ASSERT_TRUE(written.ok()) << written.status();
  auto model2 = MakeMlp();
  auto opt2 = std::make_shared<HeavyBall>(model2->parameters());
  Trainer t(model2, opt2);
  absl::Status loaded = t.load_checkpoint(dir + "/ckpt-1.pt");
  ASSERT_TRUE(loaded.ok()) << loaded;
  auto b = model2->parameters();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(torch::equal(params_then[i], b[i])) << i;
  EXPECT_TRUE(torch::equal(opt2->velocity(0), v0_then));
  testutil::RemoveTree(dir);
}

// Copies deferred to the next step (checkpoint_copy_during_step): Take
// copies only buffers and the RNG state; the snapshot cannot be written
// before CopyDeferred; the optimizer keeps its own state tensors; after
// the copy the snapshot holds the state of its step however the live
// tensors change, and the file loads to exactly that state.
TEST(AsyncCheckpointTest, CopiesDeferredToTheNextStepHoldTheStateOfTheirStep) {
  const std::string dir = testutil::MakeTempDir("async-defer");
  torch::manual_seed(2);
  auto model = MakeMlp();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.1).momentum(0.9));
  auto x = torch::randn({8, 784});
  auto one_step = [&] { PlainStep(model, *opt, x); };
  one_step();
  const auto params_then = Copies(model->parameters());
  auto momentum = [&](size_t i) {
    return dynamic_cast<torch::optim::SGDParamState&>(
               *opt->state().at(model->parameters()[i].unsafeGetTensorImpl()))
        .momentum_buffer();
  };
  const torch::Tensor m0 = momentum(0);
  const torch::Tensor m0_then = m0.clone();
  auto snap = CheckpointSnapshot::Take(*model.ptr(), *opt, CheckpointPosition{0, 1, 1, 1},
                                       /*freeze=*/true, nullptr, /*defer_copies=*/true);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE((*snap)->has_deferred_copies());
  EXPECT_TRUE(momentum(0).is_same(m0)) << "the optimizer must keep its own state tensors";
  auto early = (*snap)->WriteTo(dir + "/ckpt-early.pt");
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition) << early.status();
  EXPECT_FALSE(std::ifstream(dir + "/ckpt-early.pt").good());
  // The next step's forward and backward run while the copy is made.
  opt->zero_grad();
  model->forward(x).pow(2).mean().backward();
  std::thread copier([&] { EXPECT_TRUE((*snap)->CopyDeferred().ok()); });
  copier.join();
  EXPECT_FALSE((*snap)->has_deferred_copies());
  opt->step();  // after the copy, as the trainer orders it
  ASSERT_FALSE(torch::equal(momentum(0), m0_then));
  for (size_t i = 0; i < params_then.size(); ++i) {
    EXPECT_TRUE(torch::equal((*snap)->params()[i].second, params_then[i])) << i;
  }
  auto written = (*snap)->WriteTo(dir + "/ckpt-1.pt");
  ASSERT_TRUE(written.ok()) << written.status();
  auto model2 = MakeMlp();
  auto opt2 = std::make_shared<torch::optim::SGD>(model2->parameters(),
                                                  torch::optim::SGDOptions(0.1).momentum(0.9));
  Trainer t(model2, opt2);
  absl::Status loaded = t.load_checkpoint(dir + "/ckpt-1.pt");
  ASSERT_TRUE(loaded.ok()) << loaded;
  auto b = model2->parameters();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(torch::equal(params_then[i], b[i])) << i;
  EXPECT_TRUE(torch::equal(dynamic_cast<torch::optim::SGDParamState&>(
                               *opt2->state().at(b[0].unsafeGetTensorImpl()))
                               .momentum_buffer(),
                           m0_then));
  // Without the flag nothing is left to copy.
  auto now = CheckpointSnapshot::Take(*model.ptr(), *opt, CheckpointPosition{0, 2, 2, 1}, true);
  ASSERT_TRUE(now.ok());
  EXPECT_FALSE((*now)->has_deferred_copies());
  testutil::RemoveTree(dir);
}

// A deferred copy that cannot be made (here the snapshot's tensor no longer
// fits the live one) is INTERNAL naming the step.
TEST(AsyncCheckpointTest, ADeferredCopyThatFailsIsANamedError) {
  const std::string dir = testutil::MakeTempDir("async-defer-fail");
  torch::manual_seed(3);
  auto model = MakeMlp();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  auto snap = CheckpointSnapshot::Take(*model.ptr(), *opt, CheckpointPosition{0, 5, 5, 1},
                                       /*freeze=*/true, nullptr, /*defer_copies=*/true);
  ASSERT_TRUE(snap.ok()) << snap.status();
  (*snap)->params()[0].second.resize_({3});
  absl::Status copied = (*snap)->CopyDeferred();
  EXPECT_EQ(copied.code(), absl::StatusCode::kInternal) << copied;
  EXPECT_NE(copied.message().find("step 5"), std::string::npos) << copied;
  testutil::RemoveTree(dir);
}

// A snapshot whose copies cannot all be allocated (here: the address space
// ends after the parameter's copy and one of its optimizer state's) fails
// with the optimizer as it was: every state tensor is still its own, with
// its values (before, those already swapped for unfilled copies stayed,
// and the next step read garbage). Both ways of copying: at once, and
// deferred to the next step.
TEST(AsyncCheckpointTest, ASnapshotThatCannotAllocateLeavesTheOptimizerAsItWas) {
  const char* mode = std::getenv("FRAMEWORM_SNAPSHOT_NOMEM");
  if (mode == nullptr) {
    for (const char* m : {"now", "deferred"}) {
      const testutil::ChildRun child =
          testutil::RunThisTestAgain(std::string("FRAMEWORM_SNAPSHOT_NOMEM=") + m);
      EXPECT_EQ(child.rc, 0) << m << ": " << child.log;
      EXPECT_NE(child.log.find("[  PASSED  ] 1 test"), std::string::npos) << m << ": " << child.log;
    }
    return;
  }
  torch::set_num_threads(1);
  torch::manual_seed(5);
  // One 64 MiB weight: its copy, and each of Adam's two state tensors' copies, 64 MiB each.
  auto model = torch::nn::Linear(torch::nn::LinearOptions(4096, 4096).bias(false));
  auto opt = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  opt->zero_grad();
  model->forward(torch::randn({2, 4096})).sum().backward();
  opt->step();
  std::vector<torch::Tensor> own;
  std::vector<double> sums;
  for (const auto& kv : opt->state()) {
    auto& st = static_cast<torch::optim::AdamParamState&>(*kv.second);
    for (const torch::Tensor& t : {st.exp_avg(), st.exp_avg_sq()}) {
      own.push_back(t);
      sums.push_back(t.abs().sum().item<double>());
    }
  }
  ASSERT_EQ(own.size(), 2u);
  ASSERT_TRUE(testutil::LimitAddressSpace(160 << 10));  // 2.5 copies
  auto snap = CheckpointSnapshot::Take(*model, *opt, CheckpointPosition{0, 1, 1, 1},
                                       /*freeze=*/true, nullptr,
                                       /*defer_copies=*/std::string(mode) == "deferred");
  ASSERT_FALSE(snap.ok()) << "the limit left room for every copy";
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kInternal) << snap.status();
  size_t i = 0;
  for (const auto& kv : opt->state()) {
    auto& st = static_cast<torch::optim::AdamParamState&>(*kv.second);
    for (const torch::Tensor& t : {st.exp_avg(), st.exp_avg_sq()}) {
      EXPECT_TRUE(t.is_same(own[i])) << "state tensor " << i << " was swapped";
      EXPECT_EQ(t.abs().sum().item<double>(), sums[i]) << "state tensor " << i;
      ++i;
    }
  }
}

// A save whose thread cannot be created (here: a process limit, as a
// container's pids.max) is UNAVAILABLE and leaves nothing marked in
// flight: no disk checkpoint in flight, wait_for_snapshot() returns, and
// the next save works. (In a child that runs as nobody: root ignores
// RLIMIT_NPROC.)
TEST(AsyncCheckpointTest, ASaveWithoutAThreadIsANamedErrorAndLeavesNoFlagSet) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  if (std::getenv("FRAMEWORM_SAVE_NOTHREAD") == nullptr) {
    const testutil::ChildRun child =
        testutil::RunThisTestAgain("FRAMEWORM_SAVE_NOTHREAD=1", "timeout 120");
    EXPECT_EQ(child.rc, 0) << child.log;
    EXPECT_NE(child.log.find("[  PASSED  ] 1 test"), std::string::npos) << child.log;
    return;
  }
  const std::string dir = testutil::MakeTempDir("save-nothread-child");
  TrainerOptions o;
  o.checkpoint_dir = dir;
  auto r = MakeRig(1, o);
  auto tl = TrainLoader();
  ASSERT_TRUE(r.trainer->train_step({tl.batch(0)}).ok());
  // A first save: the second reuses its memory (no allocation but the thread's).
  ASSERT_TRUE(r.trainer->save_checkpoint_async(dir + "/ckpt-1.pt", 1).ok());
  ASSERT_TRUE(r.trainer->wait_for_checkpoint().ok());
  ASSERT_TRUE(r.trainer->train_step({tl.batch(1)}).ok());
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::setgroups(0, nullptr), 0);
  ASSERT_EQ(::setresgid(65534, 65534, 65534), 0);
  ASSERT_EQ(::setresuid(65534, 65534, 65534), 0);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NPROC, &old), 0);
  rlimit one = old;
  one.rlim_cur = 1;  // this process already: no thread more
  ASSERT_EQ(::setrlimit(RLIMIT_NPROC, &one), 0);
  absl::Status s = r.trainer->save_checkpoint_async(dir + "/ckpt-2.pt", 2);
  ASSERT_EQ(::setrlimit(RLIMIT_NPROC, &old), 0);
  ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;  // not a full disk
  EXPECT_NE(s.message().find("no thread"), std::string::npos) << s;
  EXPECT_EQ(r.trainer->disk_checkpoint_in_flight(), 0);
  r.trainer->wait_for_snapshot();  // returns: no copy is marked pending
  ASSERT_TRUE(r.trainer->train_step({tl.batch(2)}).ok());
  ASSERT_TRUE(r.trainer->save_checkpoint_async(dir + "/ckpt-3.pt", 3).ok());
  ASSERT_TRUE(r.trainer->wait_for_checkpoint().ok());
  EXPECT_TRUE(ReadCheckpointFile(dir + "/ckpt-3.pt").ok());
  testutil::RemoveTree(dir);
}

// A memory root other users could write to (a shared tmpfs someone
// prepared) turns in-memory checkpoints off; training goes on.
TEST(MemoryCheckpointTest, ARootOthersCanWriteToTurnsThemOff) {
  const std::string base = testutil::MakeTempDir("memory-open-root");
  std::filesystem::create_directories(base + "/root");
  ::chmod((base + "/root").c_str(), 0777);
  TrainerOptions o;
  o.epochs = 10;
  o.max_steps = 12;
  o.memory_checkpoint_dir = base + "/root/job";
  o.memory_checkpoint_every = 2;
  int reported = 0;
  std::mutex mu;
  o.on_checkpoint = [&](int64_t, const std::string&, const CheckpointFileInfo&) {
    std::lock_guard<std::mutex> l(mu);
    ++reported;
  };
  Rig s = MakeRig(1, o);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  ASSERT_TRUE(s.trainer->train(tl, vl).ok());
  EXPECT_EQ(reported, 0);
  EXPECT_FALSE(std::filesystem::exists(base + "/root/job"));
  testutil::RemoveTree(base);
}

// A failed disk save still ends training when in-memory checkpoints come
// between (a memory checkpoint waits for nothing, but does not swallow the
// failure of the save before it).
TEST(MemoryCheckpointTest, AFailedDiskSaveStillEndsTraining) {
  const std::string base = testutil::MakeTempDir("memory-disk-fail");
  const std::string not_a_dir = base + "/file";
  std::ofstream(not_a_dir) << "x";
  TrainerOptions o;
  o.epochs = 10;
  o.max_steps = 30;
  o.checkpoint_every = 4;
  o.checkpoint_dir = not_a_dir + "/ckpts";
  o.memory_checkpoint_dir = base + "/mem";
  o.memory_checkpoint_every = 1;
  Rig s = MakeRig(1, o);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  absl::Status st = s.trainer->train(tl, vl);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(not_a_dir), std::string::npos) << st;
  EXPECT_LT(s.trainer->state().step, 30) << "training did not stop";
  testutil::RemoveTree(base);
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// In-memory checkpoints go to their own directory at their own cadence
// (a memory one is put off, never waited for, while a save is in flight),
// are reported like disk ones and load back; a failed memory write does
// not end training.
TEST(MemoryCheckpointTest, EveryNStepsToTheirOwnDirectoryAndTheyLoad) {
  const std::string dir = testutil::MakeTempDir("memory-ckpt");
  TrainerOptions o;
  o.epochs = 10;  // 8 steps each
  o.max_steps = 24;
  o.checkpoint_every = 12;
  o.checkpoint_dir = dir + "/disk";
  o.memory_checkpoint_dir = dir + "/mem";
  o.memory_checkpoint_every = 4;
  std::mutex mu;
  std::vector<std::string> reported;
  o.on_checkpoint = [&](int64_t, const std::string& path, const CheckpointFileInfo&) {
    std::lock_guard<std::mutex> l(mu);
    reported.push_back(path);
  };
  Rig s = MakeRig(1, o);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  ASSERT_TRUE(s.trainer->train(tl, vl).ok());
  int memory = 0;
  std::set<int64_t> windows;
  for (const std::string& p : reported) {
    if (p.rfind(dir + "/mem/", 0) != 0) continue;
    ++memory;
    int64_t step = 0;
    ASSERT_TRUE(absl::SimpleAtoi(p.substr(p.rfind("ckpt-") + 5, p.size() - p.rfind("ckpt-") - 8),
                                 &step))
        << p;
    // Due at each multiple of 4, put off while a save is in flight, and
    // a disk checkpoint replaces the one due at its step.
    windows.insert(step / 4);
    EXPECT_NE(step % 12, 0) << p << ": a disk checkpoint step takes no memory one";
    EXPECT_TRUE(ReadCheckpointFile(p).ok()) << p;
  }
  EXPECT_EQ(windows.size(), static_cast<size_t>(memory)) << "two in one cadence window";
  EXPECT_GE(memory, 1) << "no in-memory checkpoint was written";
  EXPECT_LE(memory, 4);  // 4, 8, 16, 20 (12 and 24 are disk steps)
  Rig again = MakeRig(2, o);
  ASSERT_TRUE(again.trainer->load_checkpoint(dir + "/mem/ckpt-4.pt").ok() ||
              again.trainer->load_checkpoint(dir + "/mem/ckpt-8.pt").ok());
  testutil::RemoveTree(dir);
}

// Rank 0 trains `max_steps` with in-memory checkpoints every 4 steps and
// a disk checkpoint requested at step 6 whose save stays in flight until
// training has done step 9; `checkpoint_every` adds periodic disk ones.
// The steps of the memory checkpoints, in order.
std::vector<int64_t> MemoryStepsAroundASlowSave(const std::string& dir, int64_t max_steps,
                                                int64_t checkpoint_every) {
  TrainerOptions o;
  o.epochs = 10;  // 8 steps each
  o.max_steps = max_steps;
  o.checkpoint_every = checkpoint_every;
  o.checkpoint_dir = dir + "/disk";
  o.memory_checkpoint_dir = dir + "/mem";
  o.memory_checkpoint_every = 4;
  std::atomic<int64_t> done_step{0};
  std::mutex mu;
  std::vector<int64_t> memory_steps;
  bool held_until_9 = false;
  std::atomic<bool> released{false};
  Rig s = MakeRig(1, o);
  s.trainer->options().on_step = [&](const StepInfo& info) -> absl::StatusOr<StepAction> {
    done_step = info.step;
    // The save of step 6 is let go now (however slow the disk was to write
    // it): time for the checkpoint thread to end it before this step's
    // memory checkpoint is looked at.
    if (info.step == 9) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!released && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    StepAction a;
    a.checkpoint = info.step == 6;
    return a;
  };
  s.trainer->options().on_checkpoint = [&](int64_t step, const std::string& path,
                                           const CheckpointFileInfo&) {
    if (path.rfind(dir + "/mem/", 0) == 0) {
      std::lock_guard<std::mutex> l(mu);
      memory_steps.push_back(step);
      return;
    }
    // The disk save of step 6 is in flight through step 8 (the memory
    // checkpoint's due step) and beyond.
    if (step == 6) {
      held_until_9 = WaitForStep(done_step, 9);
      released = true;
    }
  };
  auto tl = TrainLoader();
  auto vl = ValLoader();
  absl::Status st = s.trainer->train(tl, vl);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(held_until_9) << "training waited for the disk save";
  std::lock_guard<std::mutex> l(mu);
  return memory_steps;
}

// A memory checkpoint due while a disk one is still being written is put
// off to the first step that finds no save in flight, not dropped: the one
// due at step 8 is taken at step 9 (or just after), not at 12.
TEST(MemoryCheckpointTest, OneDueDuringASaveIsTakenOnceTheSaveEnds) {
  const std::string dir = testutil::MakeTempDir("memory-put-off");
  const std::vector<int64_t> steps = MemoryStepsAroundASlowSave(dir, 12, /*checkpoint_every=*/0);
  ASSERT_GE(steps.size(), 2u) << absl::StrJoin(steps, ",");
  EXPECT_EQ(steps[0], 4);
  EXPECT_GE(steps[1], 9) << "taken while the disk save was in flight";
  EXPECT_LE(steps[1], 11) << "the one due at step 8 was dropped";
  testutil::RemoveTree(dir);
}

// ... but not to within half an interval (2 steps) of a periodic disk
// checkpoint, whose save would wait for its write: the disk checkpoint of
// step 10 replaces it, and the next memory one is due at 12 (taken there or
// later, while the save of step 10 is still being written, or not at all
// when a slow disk outlasts the run).
TEST(MemoryCheckpointTest, OnePutOffIsLeftToAPeriodicDiskCheckpointDueSoon) {
  const std::string dir = testutil::MakeTempDir("memory-put-off-disk");
  const std::vector<int64_t> steps = MemoryStepsAroundASlowSave(dir, 14, /*checkpoint_every=*/10);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0], 4);
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_GE(steps[i], 12) << "taken right before the periodic disk checkpoint: "
                            << absl::StrJoin(steps, ",");
  }
  testutil::RemoveTree(dir);
}

TEST(MemoryCheckpointTest, AutomaticCadenceIsAtLeastTenStepsAndAFailedWriteIsSkipped) {
  const std::string dir = testutil::MakeTempDir("memory-auto");
  std::ofstream(dir + "/file") << "x";
  TrainerOptions o;
  o.epochs = 10;  // 8 steps each
  o.max_steps = 40;
  o.memory_checkpoint_dir = dir + "/mem";
  o.memory_checkpoint_every = -1;
  std::mutex mu;
  std::vector<int64_t> steps;
  o.on_checkpoint = [&](int64_t step, const std::string&, const CheckpointFileInfo&) {
    std::lock_guard<std::mutex> l(mu);
    steps.push_back(step);
  };
  Rig s = MakeRig(1, o);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  ASSERT_TRUE(s.trainer->train(tl, vl).ok());
  ASSERT_FALSE(steps.empty());
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_GE(steps[i] - steps[i - 1], 10) << i;
  // A memory directory that cannot be made: training still succeeds.
  o.memory_checkpoint_dir = dir + "/file/mem";
  Rig t = MakeRig(1, o);
  auto tl2 = TrainLoader();
  auto vl2 = ValLoader();
  absl::Status st = t.trainer->train(tl2, vl2);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(t.trainer->state().step, 40);
  testutil::RemoveTree(dir);
}

}  // namespace
}  // namespace frameworm
