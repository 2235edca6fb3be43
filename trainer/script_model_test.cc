// Users' own models through frameworm-train, checked against PyTorch: a
// model defined and exported in Python (the .venv's torch, through
// testdata/pymodels.py), trained by frameworm-train on 1 and 2 ranks,
// compared step by step with the same model trained by PyTorch itself
// (DDP over gloo, torch's sampler, optimizers, schedulers and clipping),
// and reloaded in Python afterwards; bad model and data files.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "trainer/train_process.h"

namespace frameworm {
namespace {

using testutil::Field;
using testutil::Result;
using testutil::RunShell;
using testutil::RunTrain;

std::string Source() {
  const char* s = std::getenv("FRAMEWORM_SOURCE_DIR");
  return s ? s : ".";
}

Result Py(const std::string& args) {
  return RunShell(Source() + "/.venv/bin/python " + Source() + "/trainer/testdata/pymodels.py " +
                  args);
}

class ScriptModelTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::MakeTempDir("fw-script"); }
  void TearDown() override { testutil::RemoveTree(dir_); }
  // DIR/<kind>/model.pt and data.pt, exported by Python.
  std::string Export(const std::string& kind) {
    const std::string d = dir_ + "/" + kind;
    Result r = Py("export " + d + " " + kind);
    EXPECT_EQ(r.code, 0) << r.err;
    return d;
  }
  std::string dir_;
};

// Per-step losses and learning rates of frameworm-train (--log-every=1) and
// of the Python reference agree to `tol` relative.
void ExpectSameCurve(const Result& fw, const Result& ref, double tol) {
  std::vector<std::string> a = fw.lines_with("\"event\":\"step\"");
  std::vector<std::string> b = ref.lines_with("\"step\"");
  ASSERT_FALSE(a.empty()) << fw.out << fw.err;
  ASSERT_EQ(a.size(), b.size()) << fw.out << "\n---\n" << ref.out << ref.err;
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = Field(a[i], "loss"), lb = Field(b[i], "loss");
    EXPECT_LE(std::abs(la - lb), tol * std::abs(lb)) << "step " << i + 1 << ": " << a[i] << " vs " << b[i];
    const double ra = Field(a[i], "lr"), rb = Field(b[i], "lr");
    EXPECT_LE(std::abs(ra - rb), tol * std::abs(rb) + 1e-12) << "step " << i + 1 << " lr";
  }
}

TEST_F(ScriptModelTest, OneAndTwoRanksMatchPyTorchWithClippingDecayAndCosine) {
  const std::string d = Export("classify");
  const std::string flags =
      "--epochs=2 --batch-size=32 --lr=0.1 --clip-grad-norm=0.5 --weight-decay=0.01 "
      "--lr-schedule=cosine --min-lr=0.001";
  for (int world : {1, 2}) {
    Result fw = RunTrain("--model=" + d + "/model.pt --data=" + d + "/data.pt " + flags +
                         " --log-every=1 --checkpoint-dir=" + d + "/ck" + std::to_string(world) +
                         " --nprocs=" + std::to_string(world));
    ASSERT_EQ(fw.code, 0) << fw.err;
    Result ref = Py("reference " + d + " classify --world=" + std::to_string(world) + " " + flags);
    ASSERT_EQ(ref.code, 0) << ref.err;
    SCOPED_TRACE("world " + std::to_string(world));
    ExpectSameCurve(fw, ref, 1e-5);
    // The per-step classifier metric is there by default.
    EXPECT_GE(Field(fw.lines_with("\"event\":\"step\"").back(), "accuracy"), 0.0);
  }
}

TEST_F(ScriptModelTest, RegressionWithStepScheduleAndAdamWMatchesPyTorch) {
  const std::string d = Export("regress");
  const std::string flags =
      "--epochs=3 --batch-size=16 --lr=0.01 --optimizer=adamw --weight-decay=0.05 "
      "--lr-schedule=step --lr-step-size=20 --lr-gamma=0.5";
  Result fw = RunTrain("--model=" + d + "/model.pt --data=" + d + "/data.pt --loss=mse " + flags +
                       " --log-every=1 --checkpoint-every=1000 --checkpoint-dir=" + d + "/ck");
  ASSERT_EQ(fw.code, 0) << fw.err;
  Result ref = Py("reference " + d + " regress " + flags);
  ASSERT_EQ(ref.code, 0) << ref.err;
  ExpectSameCurve(fw, ref, 1e-5);
  // Regression losses report mae by default, not accuracy.
  const std::string done = fw.last_line();
  EXPECT_GE(Field(done, "val_mae"), 0) << done;
  EXPECT_EQ(done.find("accuracy"), std::string::npos) << done;
  // The trained model, reloaded in Python, gives the validation loss
  // frameworm-train reported.
  const std::string model = d + "/ck/model.pt";
  EXPECT_NE(done.find("\"model\":\"" + model + "\""), std::string::npos) << done;
  Result ev = Py("evaluate " + model + " " + d + "/data.pt regress");
  ASSERT_EQ(ev.code, 0) << ev.err;
  const double py = Field(ev.out, "val_loss"), fwl = Field(done, "val_loss");
  EXPECT_NEAR(py, fwl, 1e-5 * std::abs(py)) << ev.out << " vs " << done;
  // So does the final checkpoint, read by the Python client's
  // load_checkpoint into the eager model; a damaged copy is refused.
  const int64_t steps = static_cast<int64_t>(Field(done, "steps"));
  const std::string ckpt = d + "/ck/ckpt-" + std::to_string(steps) + ".pt";
  Result ck = Py("from_checkpoint " + ckpt + " " + d + "/data.pt regress");
  ASSERT_EQ(ck.code, 0) << ck.err;
  EXPECT_EQ(Field(ck.out, "step"), steps) << ck.out;
  EXPECT_NEAR(Field(ck.out, "val_loss"), fwl, 1e-5 * std::abs(fwl)) << ck.out;
  Result flip = RunShell("printf '\\377' | dd of=" + ckpt +
                         " bs=1 seek=100 conv=notrunc status=none");
  ASSERT_EQ(flip.code, 0) << flip.err;
  ck = Py("from_checkpoint " + ckpt + " " + d + "/data.pt regress");
  EXPECT_NE(ck.out.find("CRC-32 does not match"), std::string::npos) << ck.out << ck.err;
}

TEST_F(ScriptModelTest, AnUnusedBranchNeedsFindUnusedParameters) {
  const std::string d = Export("unused");
  const std::string common = "--model=" + d + "/model.pt --data=" + d +
                             "/data.pt --loss=mse --epochs=1 --batch-size=32 --nprocs=2 "
                             "--checkpoint-dir=" + d + "/ck";
  Result r = RunTrain(common);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("[spare.weight, spare.bias] received no gradient"), std::string::npos)
      << r.err;
  r = RunTrain(common + " --find-unused-parameters --log-every=1");
  ASSERT_EQ(r.code, 0) << r.err;
  Result ref = Py("reference " + d + " unused --world=2 --epochs=1 --batch-size=32");
  ASSERT_EQ(ref.code, 0) << ref.err;
  ExpectSameCurve(r, ref, 1e-5);
}

TEST_F(ScriptModelTest, AForwardOfSeveralInputsTakesThemFromTheDataFile) {
  const std::string d = Export("two_inputs");
  const std::string common = "--model=" + d + "/model.pt --data=" + d +
                             "/data.pt --loss=mse --epochs=2 --batch-size=32 --checkpoint-dir=" +
                             d + "/ck";
  Result r = RunTrain(common + " --inputs=x,mask --log-every=1");
  ASSERT_EQ(r.code, 0) << r.err;
  Result ref = Py("reference " + d + " two_inputs --epochs=2 --batch-size=32");
  ASSERT_EQ(ref.code, 0) << ref.err;
  ExpectSameCurve(r, ref, 1e-5);
  r = RunTrain(common);  // forward(x, mask) called with x only
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("mask"), std::string::npos) << r.err;
  r = RunTrain(common + " --inputs=x,weights");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--inputs names 'weights' but the data has only: x, mask"),
            std::string::npos)
      << r.err;
  r = RunTrain(common + " --inputs=x,mask,mask");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the model's forward takes 2"), std::string::npos) << r.err;
}

TEST_F(ScriptModelTest, MalformedModelAndDataFilesAreRejectedByName) {
  const std::string d = Export("regress");
  const std::string bogus = dir_ + "/bogus.pt";
  std::ofstream(bogus) << "not a model at all";
  auto train = [&](const std::string& model, const std::string& data) {
    return RunTrain("--model=" + model + " --data=" + data + " --loss=mse --max-steps=1");
  };
  Result r = train(bogus, d + "/data.pt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("model file " + bogus + " is not a TorchScript model"), std::string::npos)
      << r.err;
  r = train(dir_ + "/missing.pt", d + "/data.pt");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--model must be cnn, mlp or the path of a TorchScript model file"),
            std::string::npos)
      << r.err;
  r = train(d + "/model.pt", bogus);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("data file " + bogus + " is not a file written by torch.save"),
            std::string::npos)
      << r.err;
  // Well-formed files of the wrong content, written by Python (one run).
  struct Case {
    const char* python;
    const char* error;
  } cases[] = {
      {"[torch.zeros(3)]", "holds a GenericList, not a dict of tensors"},
      {"{'x': torch.zeros(4, 8)}", "has no 'y' tensor; it has: x"},
      {"{'x': torch.zeros(4, 8), 'y': torch.zeros(5)}", "'x' has 4 samples along dim 0 but 'y' has 5"},
      {"{'x': torch.zeros(4, 8), 'y': 'labels'}", "'y' holds a String, not a tensor"},
      {"{'x': torch.zeros(40, 8), 'y': torch.zeros(40, 1)}",
       "mse: the model's output has shape [36] but the target has shape [36, 1]"},
  };
  std::string script = "import torch";
  for (size_t i = 0; i < std::size(cases); ++i) {
    script += "; torch.save(" + std::string(cases[i].python) + ", '" + dir_ + "/case" +
              std::to_string(i) + ".pt')";
  }
  Result w = RunShell(Source() + "/.venv/bin/python -c \"" + script + "\"");
  ASSERT_EQ(w.code, 0) << w.err;
  for (size_t i = 0; i < std::size(cases); ++i) {
    r = train(d + "/model.pt", dir_ + "/case" + std::to_string(i) + ".pt");
    EXPECT_EQ(r.code, 1) << cases[i].python;
    EXPECT_NE(r.err.find(cases[i].error), std::string::npos) << cases[i].python << ": " << r.err;
  }
}

TEST_F(ScriptModelTest, EarlyStoppingAndTheBestCheckpoint) {
  const std::string d = Export("regress");
  // A learning rate that makes the model diverge after it first improves:
  // the validation loss stops improving, training stops early, and the best
  // checkpoint holds the best evaluation's weights. The monitor is named as
  // the events show it (val_loss: the validation loss).
  Result r = RunTrain("--model=" + d + "/model.pt --data=" + d +
                      "/data.pt --loss=mse --epochs=50 --batch-size=16 --lr=0.2 --momentum=0.9 "
                      "--eval-every=5 --early-stopping-patience=3 --keep-best --monitor=val_loss "
                      "--checkpoint-dir=" +
                      d + "/ck");
  ASSERT_EQ(r.code, 0) << r.err;
  // Diverged values are JSON nulls, not nan or inf.
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("inf"), std::string::npos) << r.out;
  std::vector<std::string> stop = r.lines_with("\"event\":\"early_stop\"");
  ASSERT_EQ(stop.size(), 1u) << r.out;
  std::vector<std::string> best = r.lines_with("\"event\":\"best_checkpoint\"");
  ASSERT_FALSE(best.empty()) << r.out;
  const double best_value = Field(best.back(), "value");
  EXPECT_NEAR(Field(stop[0], "best"), best_value, 1e-9 * std::abs(best_value));
  EXPECT_LT(Field(r.last_line(), "steps"), 50 * 36) << "stopped early";
  // Resuming from ckpt-best.pt with no more steps evaluates those weights.
  Result again = RunTrain("--model=" + d + "/model.pt --data=" + d +
                          "/data.pt --loss=mse --batch-size=16 --max-steps=1 --resume=" + d +
                          "/ck/ckpt-best.pt --checkpoint-dir=" + d + "/ck2");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NEAR(Field(again.last_line(), "val_loss"), best_value, 1e-6 * std::abs(best_value))
      << again.out;
}

TEST_F(ScriptModelTest, BFloat16AutocastTrainsOnTheCpu) {
  const std::string d = Export("classify");
  Result r = RunTrain("--model=" + d + "/model.pt --data=" + d +
                      "/data.pt --epochs=3 --batch-size=32 --lr=0.1 --autocast=bf16 "
                      "--checkpoint-dir=" + d + "/ck");
  ASSERT_EQ(r.code, 0) << r.err;
  const double acc = Field(r.last_line(), "val_accuracy");
  EXPECT_GT(acc, 0.6) << r.out;  // three classes: chance is 1/3
  r = RunTrain("--model=" + d + "/model.pt --data=" + d + "/data.pt --autocast=fp16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--autocast must be off or bf16"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace frameworm
