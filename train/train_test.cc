// Sampler, data, models, Trainer and checkpoints in one process.
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include "train/checkpoint_file.h"
#include "train/data.h"
#include "train/models.h"
#include "train/test_util.h"
#include "train/trainer.h"
#include "train/trainer_test_rig.h"

namespace frameworm {
namespace {


TEST(SamplerTest, DisjointCoveringPaddedDeterministicReshuffled) {
  for (int64_t n : {1, 7, 10, 23, 64, 100}) {
    for (int w : {1, 2, 3, 4, 8}) {
      for (bool shuffle : {true, false}) {
        std::vector<int64_t> all;
        std::multiset<int64_t> seen;
        for (int r = 0; r < w; ++r) {
          DistributedSampler s(n, r, w, shuffle, 42);
          s.set_epoch(3);
          auto idx = s.indices();
          EXPECT_EQ(static_cast<int64_t>(idx.size()), (n + w - 1) / w);
          EXPECT_EQ(idx, s.indices()) << "not deterministic";
          DistributedSampler again(n, r, w, shuffle, 42);
          again.set_epoch(3);
          EXPECT_EQ(idx, again.indices());
          for (auto i : idx) {
            ASSERT_GE(i, 0);
            ASSERT_LT(i, n);
            seen.insert(i);
          }
        }
        // Covering; padding repeats only total_size - n indices.
        std::set<int64_t> distinct(seen.begin(), seen.end());
        EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << n << "/" << w;
        const int64_t total = ((n + w - 1) / w) * w;
        EXPECT_EQ(static_cast<int64_t>(seen.size()), total);
        if (total == n) EXPECT_EQ(seen.size(), distinct.size()) << "not disjoint";
        // drop_last: disjoint, equal shares, nothing repeated.
        std::set<int64_t> dl;
        int64_t dl_count = 0;
        for (int r = 0; r < w; ++r) {
          DistributedSampler s(n, r, w, shuffle, 42, /*drop_last=*/true);
          for (auto i : s.indices()) {
            dl.insert(i);
            ++dl_count;
          }
        }
        EXPECT_EQ(static_cast<int64_t>(dl.size()), dl_count);
        EXPECT_EQ(dl_count, (n / w) * w);
      }
    }
  }
  DistributedSampler a(100, 0, 2, true, 1);
  auto e0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(e0, a.indices()) << "no reshuffle per epoch";
  DistributedSampler b(100, 0, 2, true, 2);
  EXPECT_NE(e0, b.indices()) << "seed ignored";
  // Without a process group the defaults are a world of one (with one, its
  // rank and size: DdpTest.TwoRanksMatchSingleProcess...).
  DistributedSampler alone(10);
  EXPECT_EQ(alone.world_size(), 1);
  EXPECT_EQ(alone.rank(), 0);
  EXPECT_EQ(alone.num_samples(), 10);
}

TEST(SamplerTest, MatchesPyTorchSequence) {
  // torch.utils.data.DistributedSampler(range(23), num_replicas=3, rank=r,
  // shuffle=True, seed=42) after set_epoch(5), computed with torch 2.11.
  const std::vector<std::vector<int64_t>> expect = {
      {7, 0, 15, 11, 3, 17, 13, 4},
      {5, 10, 14, 16, 22, 9, 20, 19},
      {1, 18, 21, 2, 8, 12, 6, 7}};
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(23, r, 3, true, 42);
    s.set_epoch(5);
    EXPECT_EQ(s.indices(), expect[r]) << "rank " << r;
  }
  DistributedSampler d(23, 2, 3, true, 42, /*drop_last=*/true);
  EXPECT_EQ(d.indices(), (std::vector<int64_t>{6, 0, 18, 21, 10, 4, 12}));
}

TEST(ModelsTest, InitialWeightsMatchPyTorch) {
  // Sums of each parameter after torch.manual_seed(42) in PyTorch.
  torch::manual_seed(42);
  auto cnn = MakeCnn();
  const std::vector<double> cnn_sums = {-4.843146, -0.268203, -2.045101, -0.561594,
                                        -1.187695, 0.02773,   -3.900804, 0.153121};
  auto ps = cnn->parameters();
  ASSERT_EQ(ps.size(), cnn_sums.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_NEAR(ps[i].to(torch::kDouble).sum().item<double>(), cnn_sums[i], 1e-4) << i;
  }
  torch::manual_seed(42);
  auto mlp = MakeMlp();
  const std::vector<double> mlp_sums = {9.196452, 0.231581, -11.350232,
                                        -0.739163, -2.512005, 0.077587};
  ps = mlp->parameters();
  ASSERT_EQ(ps.size(), mlp_sums.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_NEAR(ps[i].to(torch::kDouble).sum().item<double>(), mlp_sums[i], 1e-4) << i;
  }
  EXPECT_EQ(cnn->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_FALSE(MakeModel("resnet").ok());
}

TEST(DataTest, FashionMnistTestSplit) {
  auto d = LoadFashionMnist("/usr/share/datasets/fashion-mnist", "test");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 10000);
  EXPECT_EQ(d->images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(d->labels.min().item<int64_t>(), 0);
  EXPECT_EQ(d->labels.max().item<int64_t>(), 9);
  EXPECT_NEAR(d->images.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(d->images.std().item<double>(), 1.0, 0.05);
}

TEST(DataTest, MissingAndCorruptFilesAreNamed) {
  auto missing = LoadFashionMnist("/nonexistent-dir", "train");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent-dir/train-images-idx3-ubyte.gz"),
            std::string::npos);
  const std::string dir = testutil::MakeTempDir("fm-corrupt");
  {
    // A valid gzip stream with a wrong IDX header.
    gzFile f = gzopen((dir + "/t10k-images-idx3-ubyte.gz").c_str(), "wb");
    gzwrite(f, "garbage-garbage-garbage", 23);
    gzclose(f);
    std::ofstream l(dir + "/t10k-labels-idx1-ubyte.gz");
    l << "not gzip at all";
  }
  auto bad = LoadFashionMnist(dir, "test");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("t10k-images-idx3-ubyte.gz"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(LoadFashionMnist(dir, "validation").ok());
  testutil::RemoveTree(dir);
}

TEST(DataTest, LoaderBatchesFollowTheSampler) {
  Dataset d = MakeSyntheticDataset(100, 5);
  Dataset d2 = MakeSyntheticDataset(100, 5);
  EXPECT_TRUE(torch::equal(d.images, d2.images));
  DataLoader l(d, DataLoaderOptions{32, true, 9, false});
  l.set_distributed(1, 2);
  l.set_epoch(2);
  EXPECT_EQ(l.num_batches(), 2);  // 50 samples: 32 + 18
  DistributedSampler s(100, 1, 2, true, 9);
  s.set_epoch(2);
  auto idx = s.indices();
  Batch b = l.batch(1);
  EXPECT_EQ(b.size(), 18);
  EXPECT_EQ(b.target[0].item<int64_t>(), d.labels[idx[32]].item<int64_t>());
}

using testutil::MakeRig;
using testutil::TrainLoader;
using testutil::TrainRig;
using testutil::ValLoader;

TEST(TrainerTest, LearnsSyntheticData) {
  TrainerOptions o;
  o.epochs = 3;
  auto s = MakeRig(1, o);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  ASSERT_TRUE(s.trainer->train(tl, vl).ok());
  EXPECT_EQ(s.trainer->state().epoch, 3);
  EXPECT_EQ(s.trainer->state().step, 24);
  EXPECT_GT(s.trainer->state().val_metrics.at("accuracy"), 0.9);
  EXPECT_LT(s.trainer->state().train_metrics.at("loss"), 0.5);
}

// A step that LibTorch refuses (a class index the model has no output for)
// fails with torch's message alone: without the C++ stack trace what()
// appends, whose last line used to become a cluster job's failure reason.
TEST(TrainerTest, ATorchErrorInAStepIsOneMessageWithoutItsStackTrace) {
  auto rig = MakeRig(3, TrainerOptions{});
  Batch b{torch::randn({4, 1, 28, 28}), torch::tensor({1, 2, 100, 3}, torch::kLong), {}};
  absl::StatusOr<StepInfo> step = rig.trainer->train_step({b});
  ASSERT_FALSE(step.ok());
  const std::string m(step.status().message());
  EXPECT_EQ(m.rfind("training step failed: Target 100 is out of bounds.", 0), 0u) << m;
  EXPECT_EQ(m.find("frame #"), std::string::npos) << m;
  EXPECT_EQ(m.find("Exception raised from"), std::string::npos) << m;
}

TEST(TrainerTest, WarmupAndAccumulation) {
  TrainerOptions o;
  o.epochs = 5;
  o.warmup_steps = 4;
  o.gradient_accumulation_steps = 3;
  o.max_steps = 5;
  auto s = MakeRig(1, o);
  EXPECT_DOUBLE_EQ(s.trainer->lr_at(0), 0.05 / 4);
  EXPECT_DOUBLE_EQ(s.trainer->lr_at(3), 0.05);
  EXPECT_DOUBLE_EQ(s.trainer->lr_at(10), 0.05);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  ASSERT_TRUE(s.trainer->train(tl, vl).ok());
  EXPECT_EQ(s.trainer->state().step, 5);
  // 8 micro-batches per epoch in groups of 3: 3 steps in epoch 0 (3+3+2).
  EXPECT_EQ(s.trainer->state().epoch, 1);
  EXPECT_EQ(s.trainer->state().batch_in_epoch, 6);
}

std::string TempPath(const std::string& name) { return testutil::MakeTempDir(name); }

// A trainer that believes it is one of `world` ranks (no collectives run
// in load_checkpoint).
class TrainerInWorld : public Trainer {
 public:
  TrainerInWorld(int world, TrainRig& s) : Trainer(s.model, s.opt), world_(world) {}
  int world_size() const override { return world_; }

 private:
  int world_;
};

TEST(CheckpointTest, AnotherWorldSizeResumesAtTheSameShareOfTheEpoch) {
  TrainerOptions o;
  o.max_steps = 6;
  auto one = MakeRig(1, o);
  const std::string path = TempPath("world") + "/ckpt-6.pt";
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    ASSERT_TRUE(one.trainer->train(tl, vl).ok());
    ASSERT_EQ(one.trainer->state().batch_in_epoch, 6);
    ASSERT_TRUE(one.trainer->save_checkpoint(path).ok());
  }
  // 6 batches of one rank = 2 batches of each of 3 ranks.
  auto three = MakeRig(2, o);
  TrainerInWorld grown(3, three);
  ASSERT_TRUE(grown.load_checkpoint(path).ok());
  EXPECT_EQ(grown.state().step, 6);
  EXPECT_EQ(grown.state().epoch, 0);
  EXPECT_EQ(grown.state().batch_in_epoch, 2);
  auto four = MakeRig(3, o);
  TrainerInWorld bigger(4, four);
  ASSERT_TRUE(bigger.load_checkpoint(path).ok());
  EXPECT_EQ(bigger.state().batch_in_epoch, 1);  // 1.5, rounded down
  // The same world size: unchanged.
  auto same = MakeRig(4, o);
  ASSERT_TRUE(same.trainer->load_checkpoint(path).ok());
  EXPECT_EQ(same.trainer->state().batch_in_epoch, 6);
}

// A full disk (here: a file-size limit, EFBIG) mid-run skips that
// checkpoint, leaves no temporary file and trains on.
TEST(CheckpointTest, AFullDiskSkipsTheCheckpointAndTrainsOn) {
  TrainerOptions o;
  o.max_steps = 4;
  o.checkpoint_every = 2;
  o.checkpoint_dir = TempPath("full");
  std::vector<int64_t> skipped;
  o.on_checkpoint_skipped = [&](int64_t step, const std::string& why) {
    skipped.push_back(step);
    EXPECT_FALSE(why.empty());
  };
  auto s = MakeRig(1, o);
  absl::Status trained = testutil::TrainWithFullDisk(s);
  ASSERT_TRUE(trained.ok()) << trained;
  EXPECT_EQ(s.trainer->state().step, 4);
  EXPECT_EQ(skipped, (std::vector<int64_t>{2, 4}));  // both checkpoint_every steps
  EXPECT_TRUE(std::filesystem::is_empty(o.checkpoint_dir)) << "a checkpoint or temp file was left";
  // With room again, the same trainer checkpoints.
  auto again = s.trainer->save_checkpoint(o.checkpoint_dir + "/ckpt-4.pt");
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(CheckpointTest, ResumeThenContinueEqualsUninterrupted) {
  TrainerOptions o;
  o.epochs = 2;
  auto full = MakeRig(1, o);
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    ASSERT_TRUE(full.trainer->train(tl, vl).ok());
  }
  // Interrupted mid-epoch at step 5, checkpointed, resumed by a fresh
  // trainer with different initial weights.
  o.max_steps = 5;
  auto first = MakeRig(1, o);
  const std::string rdir = TempPath("resume");
  const std::string path = rdir + "/ckpt-5.pt";
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    ASSERT_TRUE(first.trainer->train(tl, vl).ok());
    auto info = first.trainer->save_checkpoint(path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_GT(info->bytes, 0);
    // The recorded checksum is the whole file's: any copy is checked by it.
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), info->bytes);
    char want[32];
    std::snprintf(want, sizeof want, "crc32:%08lx",
                  crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()),
                        static_cast<uInt>(bytes.size())));
    EXPECT_EQ(info->checksum, want);
  }
  o.max_steps = 0;
  auto second = MakeRig(99, o);
  ASSERT_TRUE(second.trainer->load_checkpoint(path).ok());
  EXPECT_EQ(second.trainer->state().step, 5);
  EXPECT_EQ(second.trainer->state().batch_in_epoch, 5);
  // Optimizer state (momentum buffers) restored.
  auto pa = first.model->parameters(), pb = second.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    auto& sa = static_cast<torch::optim::SGDParamState&>(
        *first.opt->state().at(pa[i].unsafeGetTensorImpl()));
    auto& sb = static_cast<torch::optim::SGDParamState&>(
        *second.opt->state().at(pb[i].unsafeGetTensorImpl()));
    EXPECT_TRUE(torch::equal(sa.momentum_buffer(), sb.momentum_buffer())) << i;
    EXPECT_TRUE(torch::equal(pa[i], pb[i]));
  }
  {
    auto tl = TrainLoader();
    auto vl = ValLoader();
    ASSERT_TRUE(second.trainer->train(tl, vl).ok());
  }
  EXPECT_EQ(second.trainer->state().step, full.trainer->state().step);
  auto pf = full.model->parameters();
  pb = second.model->parameters();
  for (size_t i = 0; i < pf.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pf[i], pb[i], 1e-6, 1e-7)) << "parameter " << i;
  }
  EXPECT_NEAR(full.trainer->state().val_metrics.at("loss"),
              second.trainer->state().val_metrics.at("loss"), 1e-6);
  testutil::RemoveTree(rdir);
}

TEST(CheckpointTest, TruncatedAndBitFlippedFilesAreRejectedAndChangeNothing) {
  TrainerOptions o;
  o.max_steps = 3;
  auto s = MakeRig(1, o);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  ASSERT_TRUE(s.trainer->train(tl, vl).ok());
  const std::string dir = TempPath("corrupt");
  const std::string good = dir + "/ckpt-3.pt";
  ASSERT_TRUE(s.trainer->save_checkpoint(good).ok());
  std::string bytes;
  {
    std::ifstream f(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  const std::string truncated = dir + "/truncated.pt";
  const std::string flipped = dir + "/flipped.pt";
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::string f2 = bytes;
  f2[f2.size() / 2] ^= 0x10;
  std::ofstream(flipped, std::ios::binary) << f2;
  std::ofstream(dir + "/tiny.pt", std::ios::binary) << "FWC";
  // A header announcing 2^62 payload bytes: refused from the file's size,
  // nothing that large allocated.
  std::string huge = bytes.substr(0, 64);
  for (int i = 8; i < 15; ++i) huge[i] = 0;
  huge[15] = 0x40;
  std::ofstream(dir + "/huge.pt", std::ios::binary) << huge;

  auto other = MakeRig(7, TrainerOptions{});
  std::vector<torch::Tensor> before;
  for (auto& p : other.model->parameters()) before.push_back(p.detach().clone());
  struct Case { std::string path, what; absl::StatusCode code; };
  for (const Case& c : {Case{truncated, "truncated", absl::StatusCode::kDataLoss},
                        Case{flipped, "checksum mismatch", absl::StatusCode::kDataLoss},
                        Case{dir + "/tiny.pt", "truncated", absl::StatusCode::kDataLoss},
                        Case{dir + "/huge.pt", "header announces 4611686018427387904 payload bytes",
                             absl::StatusCode::kDataLoss},
                        // Not files: /dev/zero used to be read until memory ran out.
                        Case{"/dev/zero", "is not a regular file", absl::StatusCode::kInvalidArgument},
                        Case{dir, "is not a regular file", absl::StatusCode::kInvalidArgument},
                        Case{dir + "/absent.pt", "does not exist", absl::StatusCode::kNotFound}}) {
    absl::Status st = other.trainer->load_checkpoint(c.path);
    ASSERT_FALSE(st.ok()) << c.path;
    EXPECT_EQ(st.code(), c.code) << st;
    EXPECT_NE(st.message().find(c.path), std::string::npos) << st;
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st;
    auto now = other.model->parameters();
    for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i], before[i]));
    EXPECT_EQ(other.trainer->state().step, 0);
    EXPECT_TRUE(other.opt->state().empty());
  }
  // A checkpoint of another architecture is refused without changes too.
  torch::manual_seed(3);
  auto cnn = MakeCnn();
  auto copt = std::make_shared<torch::optim::SGD>(cnn->parameters(), torch::optim::SGDOptions(0.1));
  Trainer ct(cnn, copt);
  absl::Status st = ct.load_checkpoint(good);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  ASSERT_TRUE(other.trainer->load_checkpoint(good).ok());
  EXPECT_EQ(other.trainer->state().step, 3);
  testutil::RemoveTree(dir);
}

// A checkpoint whose checksum is right but whose trainer state is not (an
// RNG state of another size, a step that is no scalar) is refused before
// anything changes: the parameters, the optimizer and the position stay.
TEST(CheckpointTest, ABadTrainerStateIsRefusedBeforeTheModelOrOptimizerChange) {
  TrainerOptions o;
  o.max_steps = 3;
  auto s = MakeRig(1, o);
  ASSERT_TRUE(testutil::TrainOnSynthetic(s).ok());
  ASSERT_FALSE(s.opt->state().empty()) << "momentum buffers to load";
  const std::string dir = TempPath("badstate");
  auto write = [&](const std::string& name, const torch::Tensor& step, const torch::Tensor& rng) {
    torch::serialize::OutputArchive ar;
    for (const auto& p : s.model->named_parameters(true)) ar.write("model/param/" + p.key(), p.value());
    for (const auto& b : s.model->named_buffers(true)) ar.write("model/buffer/" + b.key(), b.value(), true);
    ar.write("state/epoch", torch::tensor(int64_t{0}));
    ar.write("state/step", step);
    ar.write("state/batch_in_epoch", torch::tensor(int64_t{3}));
    ar.write("state/rng", rng);
    torch::serialize::OutputArchive opt;
    s.opt->save(opt);
    ar.write("optimizer", opt);
    std::ostringstream out;
    ar.save_to(out);
    const std::string path = dir + "/" + name;
    auto w = WriteCheckpointFile(path, out.str());
    EXPECT_TRUE(w.ok()) << w.status();
    return path;
  };
  const torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  const std::string short_rng =
      write("short-rng.pt", torch::tensor(int64_t{3}), torch::zeros({7}, torch::kByte));
  const std::string no_step = write("no-step.pt", torch::zeros({0}, torch::kLong), rng);
  const std::string fine = write("fine.pt", torch::tensor(int64_t{3}), rng);

  auto other = MakeRig(7, TrainerOptions{});
  std::vector<torch::Tensor> before;
  for (auto& p : other.model->parameters()) before.push_back(p.detach().clone());
  for (const auto& [path, what] : {std::pair<std::string, std::string>{short_rng, "RNG state has 7 values"},
                                   {no_step, "state/step holds 0 values"}}) {
    absl::Status st = other.trainer->load_checkpoint(path);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
    auto now = other.model->parameters();
    for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i], before[i])) << path;
    EXPECT_EQ(other.trainer->state().step, 0) << path;
    EXPECT_TRUE(other.opt->state().empty()) << path << ": the optimizer was loaded";
  }
  absl::Status st = other.trainer->load_checkpoint(fine);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(other.trainer->state().step, 3);
  EXPECT_FALSE(other.opt->state().empty());
  testutil::RemoveTree(dir);
}

// The final checkpoint is not written again over one of the same step: a
// run resumed from its last checkpoint with nothing left to train leaves
// the file (the one recorded) as it was.
TEST(CheckpointTest, ARunResumedAtItsLastStepDoesNotRewriteThatCheckpoint) {
  TrainerOptions o;
  o.max_steps = 4;
  o.checkpoint_every = 3;
  o.checkpoint_dir = TempPath("final");
  int written = 0;
  o.on_checkpoint = [&](int64_t, const std::string&, const CheckpointFileInfo&) { ++written; };
  auto s = MakeRig(1, o);
  ASSERT_TRUE(testutil::TrainOnSynthetic(s).ok());
  EXPECT_EQ(written, 2);  // step 3, and the final one of step 4
  const std::string last = o.checkpoint_dir + "/ckpt-4.pt";
  struct stat first {};
  ASSERT_EQ(::stat(last.c_str(), &first), 0);
  written = 0;
  auto again = MakeRig(2, o);
  ASSERT_TRUE(again.trainer->load_checkpoint(last).ok());
  ASSERT_TRUE(testutil::TrainOnSynthetic(again).ok());
  EXPECT_EQ(written, 0);
  struct stat second {};
  ASSERT_EQ(::stat(last.c_str(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino) << "ckpt-4.pt was written again";
  testutil::RemoveTree(o.checkpoint_dir);
}

// A step with both an evaluation and a checkpoint evaluates first: the
// checkpoint holds the best metric that evaluation found, so a run resumed
// from it (which does not evaluate that step again) keeps it, instead of
// taking its next, possibly worse, model for the best.
TEST(CheckpointTest, AStepsCheckpointHoldsTheBestMetricOfItsOwnEvaluation) {
  TrainerOptions o;
  o.max_steps = 2;
  o.eval_every = 2;
  o.checkpoint_every = 2;
  o.keep_best = true;
  o.checkpoint_dir = TempPath("evalfirst");
  auto s = MakeRig(1, o);
  ASSERT_TRUE(testutil::TrainOnSynthetic(s).ok());
  ASSERT_TRUE(s.trainer->best_metric().has_value());
  auto again = MakeRig(2, o);
  ASSERT_TRUE(again.trainer->load_checkpoint(o.checkpoint_dir + "/ckpt-2.pt").ok());
  ASSERT_TRUE(again.trainer->best_metric().has_value()) << "the checkpoint predates its step's evaluation";
  EXPECT_EQ(*again.trainer->best_metric(), *s.trainer->best_metric());
  testutil::RemoveTree(o.checkpoint_dir);
}

TEST(DataParallelTest, OneDeviceTrainsAndSaysSo) {
  torch::manual_seed(1);
  auto model = MakeMlp();
  testing::internal::CaptureStdout();
  auto wrapped = DataParallelTrainer::wrap(model);
  const std::string log = testing::internal::GetCapturedStdout();
  if (torch::cuda::device_count() < 2) {
    EXPECT_NE(log.find("without data parallelism"), std::string::npos) << log;
  }
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05));
  TrainerOptions o;
  o.verbose = false;
  o.epochs = 2;
  Trainer t(wrapped, opt, torch::kCPU, o);
  auto tl = TrainLoader();
  auto vl = ValLoader();
  ASSERT_TRUE(t.train(tl, vl).ok());
  EXPECT_GT(t.state().val_metrics.at("accuracy"), 0.5);
}

}  // namespace
}  // namespace frameworm
