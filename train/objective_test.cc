// Losses, metrics, schedules, data splits and the training options of the
// library (train/objective.h, lr_schedule.h, tensor_file.h, trainer.h)
// in one process. PyTorch-equality of whole runs is trainer/script_model_test.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "train/data.h"
#include "train/lr_schedule.h"
#include "train/objective.h"
#include "train/memory_cadence.h"
#include "train/step_action_gap.h"
#include "train/tensor_file.h"
#include "train/test_util.h"
#include "train/trainer.h"

namespace frameworm {
namespace {

TEST(ObjectiveTest, UnknownNamesAndRepeatsAreRefusedWithTheKnownOnes) {
  auto l = MakeLoss("hinge");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("unknown loss 'hinge'; known: cross_entropy, nll, mse"),
            std::string::npos)
      << l.status();
  auto m = MakeMetrics("accuracy,f1");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown metric 'f1'"), std::string::npos) << m.status();
  m = MakeMetrics("mae,mae");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'mae' is listed twice"), std::string::npos);
  EXPECT_TRUE(MakeMetrics("none")->empty());
  EXPECT_EQ(DefaultMetrics("mse"), std::vector<std::string>{"mae"});
}

TEST(ObjectiveTest, ValuesAreTorchsAndShapeMismatchesThrow) {
  torch::Tensor out = torch::tensor({{2.0, 0.5}, {0.1, 1.0}, {3.0, -1.0}});
  torch::Tensor cls = torch::tensor({0, 1, 1}, torch::kLong);
  EXPECT_NEAR((*MakeLoss("cross_entropy"))(out, cls).item<double>(),
              torch::nn::functional::cross_entropy(out, cls).item<double>(), 1e-12);
  EXPECT_NEAR((*MakeMetric("accuracy"))(out, cls).item<double>(), 2.0 / 3, 1e-7);
  torch::Tensor pred = torch::tensor({1.0, 2.0, 4.0}), y = torch::tensor({1.5, 2.0, 3.0});
  EXPECT_NEAR((*MakeLoss("mse"))(pred, y).item<double>(), (0.25 + 0 + 1) / 3, 1e-7);
  EXPECT_NEAR((*MakeMetric("mae"))(pred, y).item<double>(), 0.5, 1e-7);
  EXPECT_NEAR((*MakeMetric("binary_accuracy"))(torch::tensor({-1.0, 2.0}), torch::tensor({0.0, 0.0}))
                  .item<double>(),
              0.5, 1e-7);
  try {
    (*MakeLoss("mse"))(pred.unsqueeze(1), y);
    FAIL() << "a [3, 1] output against a [3] target must not broadcast";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("output has shape [3, 1] but the target has shape [3]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((*MakeLoss("cross_entropy"))(out, torch::tensor({0.0, 1.0, 1.0})), c10::Error);
}

// The gap between spaced step-action broadcasts: enough steps to keep a
// broadcast within the share, no more than fit in the delay, at least 1.
// 2% of the step time: the snapshot's blocking and its background copy and
// write both count; at least 10 steps, at most 10^6; bad inputs are safe.
TEST(MemoryCheckpointIntervalTest, KeepsBlockingAndBackgroundWorkNearTwoPercent) {
  EXPECT_EQ(MemoryCheckpointInterval(0.001, 0.0, 0.1), 10);   // 0.5 steps' worth
  EXPECT_EQ(MemoryCheckpointInterval(0.01, 0.05, 0.1), 30);   // 60 ms / 2 ms
  EXPECT_EQ(MemoryCheckpointInterval(0.01, 0.0, 0.1), 10);    // the background is what counts
  EXPECT_EQ(MemoryCheckpointInterval(0.0, 0.2, 0.05), 200);
  EXPECT_EQ(MemoryCheckpointInterval(0.0, 0.2, 0.0), 1000000);
  EXPECT_EQ(MemoryCheckpointInterval(-1.0, std::nan(""), 0.1), 10);
  EXPECT_EQ(MemoryCheckpointInterval(1e300, 1e300, 1e-300), 1000000);
}

TEST(StepActionGapTest, KeepsTheShareWithinTheDelay) {
  // 0.5 ms broadcast, 4 ms step, 1%: 13 steps wanted, 12 fit in 50 ms.
  EXPECT_EQ(StepActionGap(0.0005, 0.004, 0.01, 0.05), 12);
  EXPECT_EQ(StepActionGap(0.0005, 0.004, 0.01, 1.0), 13);
  // A 30 ms step: 2 steps keep 0.5 ms under 1%; only 1 fits in 50 ms.
  EXPECT_EQ(StepActionGap(0.0005, 0.030, 0.01, 0.05), 1);
  EXPECT_EQ(StepActionGap(0.0005, 0.030, 0.01, 0.1), 2);
  // A cheap broadcast (shared memory): every step.
  EXPECT_EQ(StepActionGap(0.000002, 0.001, 0.01, 0.05), 1);
  // Unknown or bad inputs: every step.
  EXPECT_EQ(StepActionGap(0, 0.004, 0.01, 0.05), 1);
  EXPECT_EQ(StepActionGap(0.0005, 0, 0.01, 0.05), 1);
  EXPECT_EQ(StepActionGap(0.0005, 0.004, 0, 0.05), 1);
  EXPECT_EQ(StepActionGap(0.0005, 0.004, 0.01, std::nan("")), 1);
  EXPECT_EQ(StepActionGap(std::numeric_limits<double>::infinity(), 0.004, 0.01, 0.05), 1);
  EXPECT_EQ(StepActionGap(1.0, 1e-9, 1e-9, 1e9), 1000000);
}

TEST(LrScheduleTest, WarmupThenEachScheduleAndBadParameters) {
  LrSchedule s;
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 0, 4, 0), 0.025);  // warmup: (k + 1) / 4
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 3, 4, 0), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 99, 4, 0), 0.1);
  s.kind = "step";
  s.step_size = 10;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 9, 0, 0), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 10, 0, 0), 0.05);
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 14, 4, 0), 0.05);  // counted after warmup
  s.kind = "cosine";
  s.min_lr = 0.01;
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 0, 0, 10), 0.1);
  EXPECT_NEAR(ScheduledLr(s, 0.1, 5, 0, 10), 0.055, 1e-15);
  EXPECT_DOUBLE_EQ(ScheduledLr(s, 0.1, 10, 0, 10), 0.01);
  EXPECT_NEAR(ScheduledLr(s, 0.1, 7, 2, 12), 0.055, 1e-15);  // 5 of 10 after warmup
  s.kind = "linear";
  EXPECT_NEAR(ScheduledLr(s, 0.1, 5, 0, 10), 0.055, 1e-15);
  for (const auto& [bad, why] : std::vector<std::pair<LrSchedule, std::string>>{
           {{"exp"}, "unknown learning-rate schedule 'exp'"},
           {{"step", 0}, "step size > 0"},
           {{"constant", 0, -1}, "gamma must be >= 0"},
           {{"cosine", 0, 0.1, -5}, "total steps must be >= 0"},
           {{"cosine", 0, 0.1, 0, -0.1}, "min lr must be >= 0"}}) {
    absl::Status st = CheckLrSchedule(bad);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(why), std::string::npos) << st;
  }
}

TEST(TensorFileTest, SplitsAndMissingFiles) {
  Dataset d;
  d.images = torch::arange(20).reshape({10, 2});
  d.labels = torch::arange(10);
  d.inputs["mask"] = torch::ones({10, 2});
  auto s = SplitDataset(d, 0.2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->first.size(), 8);
  EXPECT_EQ(s->second.size(), 2);
  EXPECT_EQ(s->second.labels[0].item<int64_t>(), 8);  // the last samples
  EXPECT_EQ(s->second.inputs.at("mask").size(0), 2);
  EXPECT_FALSE(SplitDataset(d, 0).ok());
  EXPECT_FALSE(SplitDataset(d, 0.01).ok());  // rounds to no validation sample
  auto missing = ReadTensorFile("/nonexistent/data.pt");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string dir = testutil::MakeTempDir("fw-tensorfile");
  const std::string big = dir + "/big.pt";
  {
    std::vector<char> bytes = torch::pickle_save(c10::IValue(torch::zeros({64})));
    std::FILE* f = std::fopen(big.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  auto too_big = ReadTensorFile(big, 16);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted) << too_big.status();
  auto not_dict = ReadTensorFile(big);
  EXPECT_NE(not_dict.status().message().find("holds a Tensor, not a dict of tensors"),
            std::string::npos)
      << not_dict.status();
  testutil::RemoveTree(dir);
}

// A regression trainer with the library's options on a linear problem.
class OptionsTest : public ::testing::Test {
 protected:
  OptionsTest() {
    torch::manual_seed(0);
    torch::Tensor x = torch::randn({256, 4});
    Dataset d;
    d.images = x;
    d.labels = x.matmul(torch::tensor({1.0f, -2.0f, 0.5f, 3.0f}));
    train_ = d;
    val_ = d;
    model_ = torch::nn::Sequential(torch::nn::Linear(4, 1), torch::nn::Flatten(
                                                                torch::nn::FlattenOptions().start_dim(0)));
  }
  Trainer Make(TrainerOptions o) {
    o.verbose = false;
    o.loss = *MakeLoss("mse");
    return Trainer(model_, std::make_shared<torch::optim::SGD>(model_->parameters(),
                                                              torch::optim::SGDOptions(0.05)),
                   torch::kCPU, std::move(o));
  }
  Dataset train_, val_;
  torch::nn::Sequential model_{nullptr};
};

TEST_F(OptionsTest, AUserMetricIsReportedByNameAndClippingBoundsTheUpdate) {
  TrainerOptions o;
  o.metrics = {{"mae", *MakeMetric("mae")},
               {"within_0.5", [](const torch::Tensor& out, const torch::Tensor& y) {
                  return (out - y).abs().lt(0.5).to(torch::kFloat).mean();
                }}};
  o.clip_grad_norm = 1e-3;
  Trainer t = Make(o);
  std::vector<torch::Tensor> before;
  for (const auto& p : model_->parameters()) before.push_back(p.detach().clone());
  DataLoader tl(train_, {32, false, 0, false}), vl(val_, {64, false, 0, false});
  auto step = t.train_step({tl.batch(0)});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->metrics.count("within_0.5"));
  // One SGD step moves the parameters by lr x (clipped) gradient: total
  // norm 0.05 x 1e-3.
  double moved = 0;
  size_t i = 0;
  for (const auto& p : model_->parameters()) moved += (p.detach() - before[i++]).pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(moved), 0.05 * 1e-3, 1e-8);
  auto v = t.evaluate(vl);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->count("mae") && v->count("within_0.5") && v->count("loss"));
  EXPECT_FALSE(v->count("accuracy"));
}

TEST_F(OptionsTest, BadOptionsAreRefusedBeforeTraining) {
  DataLoader tl(train_, {32, false, 0, false}), vl(val_, {64, false, 0, false});
  TrainerOptions half;
  half.autocast = torch::kHalf;
  absl::Status s = Make(half).train(tl, vl);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("autocast supports bfloat16 only"), std::string::npos) << s;
  TrainerOptions monitor;
  monitor.metrics = {};
  monitor.monitor = "accuracy";
  monitor.early_stopping_patience = 2;
  s = Make(monitor).train(tl, vl);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the monitored metric 'accuracy' is not a validation metric; there "
                             "are: loss"),
            std::string::npos)
      << s;
  // A typo is refused even where nothing watches the metric yet.
  TrainerOptions typo;
  typo.monitor = "val_acuracy";
  s = Make(typo).train(tl, vl);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the monitored metric 'val_acuracy' is not a validation metric"),
            std::string::npos)
      << s;
  TrainerOptions sched;
  sched.lr_schedule.kind = "step";
  s = Make(sched).train(tl, vl);
  EXPECT_NE(s.message().find("step size > 0"), std::string::npos) << s;
  // A loss that does not fit the data: an error status naming the shapes.
  TrainerOptions ce;
  Trainer t(model_, std::make_shared<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.05)),
            torch::kCPU, ce);  // default cross-entropy on float targets
  auto step = t.train_step({tl.batch(0)});
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.status().message().find("cross_entropy: the target must hold class indices"),
            std::string::npos)
      << step.status();
}

}  // namespace
}  // namespace frameworm
