// frameworm-train as a user runs it: real processes, real data.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "jobspec/train_flags.h"
#include "train/launch.h"
#include "trainer/train_process.h"

namespace frameworm {
namespace {

using testutil::Field;
using testutil::Result;
using testutil::RunShell;
using testutil::RunTrain;
using testutil::TrainBin;

const TrainFlag& FindFlag(const std::string& name) {
  for (const TrainFlag& f : TrainFlags()) {
    if (name == f.name) return f;
  }
  ADD_FAILURE() << "no flag " << name;
  return TrainFlags().front();
}

TEST(FramewormTrainTest, HelpListsEveryFlagAndVersionPrintsOne) {
  Result r = RunTrain("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("usage: frameworm-train", 0), 0u) << r.out;
  for (const char* f : {"--batch-size\n", "(default: 64)", "--nprocs\n", "--device\n",
                        "(default: auto)", "--find-unused-parameters\n", "--version"}) {
    EXPECT_NE(r.out.find(f), std::string::npos) << f << " in " << r.out;
  }
  r = RunTrain("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("frameworm-train ", 0), 0u) << r.out;
}

// jobspec/train_flags.h's table, which refuses a job's misspelt train
// option at submit, is the trainer's own flags: the names --help lists,
// each accepting a value of the table's kind and refusing one of another.
TEST(FramewormTrainTest, TrainFlagsTableIsTheTrainers) {
  Result help = RunTrain("--help");
  ASSERT_EQ(help.code, 0);
  std::set<std::string> listed, table;
  std::istringstream lines(help.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  --", 0) != 0 || line.find(',') != std::string::npos) continue;
    listed.insert(line.substr(4));
  }
  for (const TrainFlag& f : TrainFlags()) table.insert(f.name);
  EXPECT_EQ(listed, table);
  // A value of each flag's kind within its range or choices ("-3" where
  // an integer has no range: no uint64 takes it).
  auto valid = [](const TrainFlag& f) -> std::string {
    if (!f.choices.empty()) return f.choices.back();  // never the empty choice
    if (f.name_list) return "x,y";
    const bool has_min = std::isfinite(f.min), has_max = std::isfinite(f.max);
    switch (f.kind) {
      case TrainFlagKind::kString: return "abc";
      case TrainFlagKind::kBool: return "true";
      case TrainFlagKind::kInt64:
        return has_min ? std::to_string(static_cast<int64_t>(f.min) + (f.min_open ? 1 : 0)) : "-3";
      case TrainFlagKind::kUint64: return "3";
      case TrainFlagKind::kDouble:
        if (has_min && has_max) return std::to_string(f.min / 2 + f.max / 2);
        return has_min ? std::to_string(f.min + 1.5) : "1.5";
    }
    return "";
  };
  auto invalid = [](TrainFlagKind k) -> std::string {
    switch (k) {
      case TrainFlagKind::kString: return "";
      case TrainFlagKind::kBool: return "maybe";
      case TrainFlagKind::kInt64: return "1.5";
      case TrainFlagKind::kUint64: return "-1";
      case TrainFlagKind::kDouble: return "abc";
    }
    return "";
  };
  // All at once: the parser takes every one and stops at the unknown flag
  // after them (before any value's range or meaning is checked).
  std::string all;
  for (const TrainFlag& f : TrainFlags()) {
    EXPECT_EQ(CheckTrainOption(f.name, valid(f)), std::nullopt) << f.name << "=" << valid(f);
    all += std::string(" --") + f.name + "=" + valid(f);
  }
  Result r = RunTrain(all + " --no-such-flag");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown flag --no-such-flag"), std::string::npos) << r.err;
  // The command-line forms SplitTrainArgs reads (a job's entrypoint
  // arguments) are the ones the trainer's parser takes.
  const std::vector<std::string> forms = {"--model", "cnn", "--batch_size=64", "--keep-best",
                                          "--noscale-lr", "--lr", "0.1"};
  auto split = SplitTrainArgs(forms);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->size(), 5u);
  std::string joined;
  for (const std::string& a : forms) joined += " " + a;
  r = RunTrain(joined + " --no-such-flag");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown flag --no-such-flag"), std::string::npos) << r.err;
  for (const TrainFlag& f : TrainFlags()) {
    if (f.kind == TrainFlagKind::kString) continue;
    const std::string bad = invalid(f.kind);
    EXPECT_NE(CheckTrainOption(f.name, bad), std::nullopt) << f.name << "=" << bad;
    r = RunTrain(std::string("--") + f.name + "=" + bad + " --no-such-flag");  // never trains
    EXPECT_EQ(r.code, 2) << f.name;
    EXPECT_NE(r.err.find(std::string("--") + f.name + ": bad value '" + bad + "'"), std::string::npos)
        << f.name << ": " << r.err;
  }
}

// Each range and choice of the table is one the trainer enforces: the
// first value past each end of a range, a choice that is none, an empty
// name in a list, each refused by CheckTrainOption (what a submit runs)
// and by the trainer with the same words, before it starts; the ends
// themselves accepted. And the rule that joins two flags.
TEST(FramewormTrainTest, TheTrainerRefusesWhatTheTableRefuses) {
  EXPECT_EQ(FindFlag("nprocs").max, kMaxLaunchProcesses);
  struct Case {
    std::string flag, bad, good;
  };
  std::vector<Case> cases;
  // Bad values short (%g: the trainer shows a number as absl prints it,
  // in the fewest digits that give it back); good ones exact, at the edge.
  auto number = [](const TrainFlag& f, double v, const char* format) {
    if (f.kind != TrainFlagKind::kDouble) return std::to_string(static_cast<int64_t>(v));
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  for (const TrainFlag& f : TrainFlags()) {
    const bool integral = f.kind == TrainFlagKind::kInt64 || f.integer_too;
    if (std::isfinite(f.min)) {
      const double bad = f.min_open ? f.min : f.min - 1;
      const double good = f.min_open ? (integral ? f.min + 1 : std::nextafter(f.min, 1e300)) : f.min;
      cases.push_back({f.name, number(f, bad, "%g"), number(f, good, "%.17g")});
    }
    if (std::isfinite(f.max)) {
      const double bad = f.max_open ? f.max : (integral ? f.max + 1 : f.max * 10);
      const double good = f.max_open ? std::nextafter(f.max, -1e300) : f.max;
      cases.push_back({f.name, number(f, bad, "%g"), number(f, good, "%.17g")});
    }
    if (!f.choices.empty() && !f.path) cases.push_back({f.name, "no-such-choice", f.choices.back()});
    if (f.name_list) cases.push_back({f.name, "a,,b", "a,b"});
  }
  ASSERT_GE(cases.size(), 30u);
  for (const Case& c : cases) {
    auto problem = CheckTrainOption(c.flag, c.bad);
    EXPECT_EQ(CheckTrainOption(c.flag, c.good), std::nullopt) << c.flag << "=" << c.good;
    if (!problem.has_value()) {
      ADD_FAILURE() << c.flag << "=" << c.bad << " accepted";
      continue;
    }
    Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=1 --" + c.flag + "=" + c.bad);
    EXPECT_EQ(r.code, 2) << c.flag << "=" << c.bad << ": " << r.err;
    EXPECT_NE(r.err.find("--" + c.flag + " " + *problem), std::string::npos)
        << c.flag << "=" << c.bad << ": " << r.err;
    EXPECT_EQ(r.out.find("\"event\":\"start\""), std::string::npos) << r.out;
  }
  // The step schedule needs its period: refused with the default 0 and
  // with one given, accepted with one >= 1.
  EXPECT_NE(CheckTrainOptionSet({{"lr-schedule", "step"}}), std::nullopt);
  EXPECT_NE(CheckTrainOptionSet({{"lr-schedule", "step"}, {"lr-step-size", "0"}}), std::nullopt);
  EXPECT_EQ(CheckTrainOptionSet({{"lr-schedule", "step"}, {"lr-step-size", "1"}}), std::nullopt);
  EXPECT_EQ(CheckTrainOptionSet({{"lr-schedule", "cosine"}}), std::nullopt);
  Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=1 --lr-schedule=step");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(CheckTrainOptionSet({{"lr-schedule", "step"}})->message), std::string::npos)
      << r.err;
}

TEST(FramewormTrainTest, BadFlagsExitTwoWithMessage) {
  Result r = RunTrain("--no-such-flag");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown flag --no-such-flag"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  r = RunTrain("--model=resnet");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  r = RunTrain("--batch-size=0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--batch-size"), std::string::npos) << r.err;
  r = RunTrain("--lr");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("needs a value"), std::string::npos) << r.err;
  r = RunTrain("--device=tpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--device must be auto, cpu or cuda"), std::string::npos) << r.err;
  r = RunTrain("--dataset=synthetic stray");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unexpected argument \"stray\""), std::string::npos) << r.err;
}

TEST(FramewormTrainTest, OutOfRangeValuesExitTwoBeforeAnythingStarts) {
  // Each would otherwise fork 100,000 processes, start 100,000 threads or
  // fail at the first step.
  const struct {
    const char* flag;
    const char* message;
  } cases[] = {
      {"--nprocs=100000", "--nprocs must be an integer between 1 and 1024, got '100000'"},
      {"--threads=100000", "--threads must be an integer between 1 and 1024, got '100000'"},
      {"--lr=1e300", "--lr must be a number > 0 and <= 3.40282e+38, got '1e+300'"},
      {"--momentum=inf", "--momentum must be a number between 0 and 3.40282e+38, got 'inf'"},
      {"--weight-decay=1e39", "--weight-decay must be a number between 0 and 3.40282e+38, got '1e+39'"},
  };
  for (const auto& c : cases) {
    Result r = RunTrain(std::string("--model=mlp --dataset=synthetic --max-steps=1 ") + c.flag);
    EXPECT_EQ(r.code, 2) << c.flag << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.flag << ": " << r.err;
    EXPECT_EQ(r.out.find("\"event\":\"start\""), std::string::npos) << c.flag << ": " << r.out;
  }
}

TEST(FramewormTrainTest, ASyntheticSetThatCannotFitIsAClearFailure) {
  // More than any machine's memory: refused before allocating.
  Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=1 --synthetic-size=10000000000");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("--synthetic-size 10000000000 needs 37479400 MB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("more than this machine's"), std::string::npos) << r.err;
  // Within the machine's memory but not the process's (an address-space
  // limit): the allocation fails, and the message says so in one line
  // instead of an abort with torch's stack trace.
  r = RunShell("ulimit -v 3000000; " + TrainBin() +
               " --model=mlp --dataset=synthetic --max-steps=1 --synthetic-size=1000000");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("--synthetic-size 1000000: cannot allocate its 3747 MB of samples"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("frame #"), std::string::npos) << r.err;
}

// A directory or a device where a file belongs is named as such, and never
// read (--resume=/dev/zero used to read until memory ran out, then abort).
TEST(FramewormTrainTest, PathsThatAreNotFilesAreRefusedUnread) {
  Result r = RunTrain("--model=/tmp --dataset=synthetic --max-steps=1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("got \"/tmp\" (not a regular file)"), std::string::npos) << r.err;
  r = RunTrain("--model=mlp --data=/dev/zero --max-steps=1");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("data file /dev/zero is not a regular file"), std::string::npos) << r.err;
  r = RunTrain("--model=mlp --dataset=synthetic --max-steps=1 --resume=/dev/zero");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("checkpoint /dev/zero is not a regular file"), std::string::npos) << r.err;
}

TEST(FramewormTrainTest, MalformedClusterVariableIsAClearFailure) {
  Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=1", "FRAMEWORM_GENERATION=two");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("FRAMEWORM_GENERATION"), std::string::npos) << r.err;
}

TEST(FramewormTrainTest, CudaDeviceWithoutCudaIsAClearFailure) {
  Result r = RunTrain("--dataset=synthetic --max-steps=1 --device=cuda");
  if (r.code == 0) GTEST_SKIP() << "CUDA is available here";
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--device=cuda but CUDA is not available"), std::string::npos) << r.err;
}

TEST(FramewormTrainTest, SyntheticRunPrintsDoneJson) {
  Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=6 --batch-size=16");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string last = r.last_line();
  EXPECT_EQ(last.rfind("{\"event\":\"done\"", 0), 0u) << last;
  EXPECT_EQ(Field(last, "steps"), 6);
  EXPECT_EQ(Field(last, "world_size"), 1);
  for (const char* k : {"epochs", "train_loss", "val_loss", "val_accuracy"}) {
    EXPECT_GE(Field(last, k), 0) << k << " in " << last;
  }
}

TEST(FramewormTrainTest, CoordinatorWithoutJobIdRunsLocally) {
  // The CLI's FRAMEWORM_COORDINATOR exported in the shell: nothing listens
  // there, and a trainer that is no job's runs on its own.
  Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=3 --batch-size=16",
                      "FRAMEWORM_COORDINATOR=127.0.0.1:1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Field(r.last_line(), "steps"), 3);
}

TEST(FramewormTrainTest, JobTrainerThatCannotReachItsCoordinatorFailsNamingIt) {
  Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=3 --connect-timeout=1",
                      "FRAMEWORM_COORDINATOR=127.0.0.1:1 FRAMEWORM_JOB_ID=job-x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot reach the coordinator at 127.0.0.1:1"), std::string::npos)
      << r.err;
}

TEST(FramewormTrainTest, MpiBackendAndMissingDataAreClearFailures) {
  // No build has MPI: refused with the flags, before anything starts.
  Result r = RunTrain("--dataset=synthetic --max-steps=1 --backend=mpi");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--backend"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mpi"), std::string::npos) << r.err;
  r = RunTrain("--max-steps=1 --data-dir=/nonexistent");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/train-images-idx3-ubyte.gz"), std::string::npos) << r.err;
}

TEST(FramewormTrainTest, CheckpointEveryAndResumeLatest) {
  const std::string dir = testutil::MakeTempDir("fwtrain-ckpt");
  const std::string common = "--model=mlp --dataset=synthetic --synthetic-size=512 --batch-size=32 "
                             "--epochs=3 --checkpoint-dir=" + dir;
  Result full = RunTrain(common);
  ASSERT_EQ(full.code, 0) << full.err;
  Result first = RunTrain(common + " --max-steps=20 --checkpoint-every=10");
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("\"path\":\"" + dir + "/ckpt-20.pt\""), std::string::npos) << first.out;
  Result second = RunTrain(common + " --resume=latest");
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.out.find("\"event\":\"resumed\""), std::string::npos);
  EXPECT_EQ(Field(second.last_line(), "steps"), 48);
  // Resume-then-continue equals the uninterrupted run.
  EXPECT_EQ(Field(second.last_line(), "val_loss"), Field(full.last_line(), "val_loss"))
      << second.last_line() << "\n" << full.last_line();
  // A synchronous save (every rank waits for the write) of the same run
  // resumes to the same result as the asynchronous default's.
  const std::string sync_dir = testutil::MakeTempDir("fwtrain-sync");
  const std::string sync_common = "--model=mlp --dataset=synthetic --synthetic-size=512 "
                                  "--batch-size=32 --epochs=3 --checkpoint-dir=" + sync_dir;
  Result sync = RunTrain(sync_common + " --max-steps=20 --checkpoint-every=10 --async-checkpoint=false");
  ASSERT_EQ(sync.code, 0) << sync.err;
  EXPECT_NE(sync.out.find("\"path\":\"" + sync_dir + "/ckpt-20.pt\""), std::string::npos) << sync.out;
  Result sync_resumed = RunTrain(sync_common + " --resume=latest");
  ASSERT_EQ(sync_resumed.code, 0) << sync_resumed.err;
  EXPECT_EQ(Field(sync_resumed.last_line(), "val_loss"), Field(full.last_line(), "val_loss"));
  testutil::RemoveTree(sync_dir);
  // The worker's FRAMEWORM_RESUME_FROM wins over --resume.
  Result from_env = RunTrain(common + " --resume=latest",
                             "FRAMEWORM_RESUME_FROM=" + dir + "/ckpt-10.pt");
  ASSERT_EQ(from_env.code, 0) << from_env.err;
  EXPECT_NE(from_env.out.find("\"event\":\"resumed\",\"path\":\"" + dir + "/ckpt-10.pt\""),
            std::string::npos) << from_env.out;
  EXPECT_EQ(Field(from_env.last_line(), "steps"), 48);
  // A corrupt newest checkpoint gives way to the one before it (said on
  // stderr); when none loads, the run fails naming each.
  { std::ofstream(dir + "/ckpt-30.pt") << "garbage"; }
  Result older = RunTrain(common + " --resume=latest");
  ASSERT_EQ(older.code, 0) << older.err;
  EXPECT_NE(older.err.find("ckpt-30.pt"), std::string::npos) << older.err;
  EXPECT_NE(older.err.find("trying the checkpoint before it"), std::string::npos) << older.err;
  EXPECT_NE(older.out.find("\"event\":\"resumed\",\"path\":\"" + dir + "/ckpt-20.pt\""),
            std::string::npos) << older.out;
  EXPECT_EQ(Field(older.last_line(), "val_loss"), Field(full.last_line(), "val_loss"));
  const std::string all_bad = testutil::MakeTempDir("fwtrain-allbad");
  { std::ofstream(all_bad + "/ckpt-5.pt") << "garbage"; }
  { std::ofstream(all_bad + "/ckpt-9.pt") << "more garbage"; }
  Result bad = RunTrain("--model=mlp --dataset=synthetic --synthetic-size=512 --batch-size=32 "
                        "--epochs=1 --resume=latest --checkpoint-dir=" + all_bad);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("no checkpoint in " + all_bad + " loads"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("ckpt-5.pt"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("ckpt-9.pt"), std::string::npos) << bad.err;
  testutil::RemoveTree(all_bad);
  // The newest by step, by the name it has on disk (zero-padded: step 40).
  std::filesystem::remove(dir + "/ckpt-30.pt");
  std::filesystem::copy_file(dir + "/ckpt-20.pt", dir + "/ckpt-00040.pt");
  Result padded = RunTrain(common + " --resume=latest");
  ASSERT_EQ(padded.code, 0) << padded.err;
  EXPECT_NE(padded.out.find("\"event\":\"resumed\",\"path\":\"" + dir + "/ckpt-00040.pt\""),
            std::string::npos)
      << padded.out;
  testutil::RemoveTree(dir);
}

TEST(FramewormTrainTest, TwoRanksOnFashionMnistViaNprocs) {
  Result r = RunTrain(
      "--model=cnn --dataset=fashion-mnist --nprocs=2 --batch-size=32 --max-steps=4 --log-every=1");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string last = r.last_line();
  EXPECT_EQ(last.rfind("{\"event\":\"done\"", 0), 0u) << last;
  EXPECT_EQ(Field(last, "world_size"), 2);
  EXPECT_EQ(Field(last, "steps"), 4);
  // Only rank 0 prints the done line.
  EXPECT_EQ(r.out.find("\"event\":\"done\""), r.out.rfind("\"event\":\"done\""));
  // Both ranks on this machine: gradients are averaged in shared memory.
  EXPECT_NE(r.out.find("\"gradient_allreduce\":\"shm\""), std::string::npos) << r.out;
  // Every step line splits the step: the allreduce wait is part of it.
  std::istringstream lines(r.out);
  int steps = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"event\":\"step\"", 0) != 0) continue;
    ++steps;
    const double step = Field(line, "step_seconds"), wait = Field(line, "wait_seconds");
    EXPECT_GT(step, 0) << line;
    EXPECT_GE(wait, 0) << line;
    EXPECT_LE(wait, step) << line;
  }
  EXPECT_EQ(steps, 4) << r.out;
}

TEST(FramewormTrainTest, NoShmEnvironmentKeepsGradientsOnGloo) {
  Result r = RunTrain("--model=mlp --dataset=synthetic --nprocs=2 --batch-size=16 --max-steps=3",
                      "FRAMEWORM_NO_SHM=1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"gradient_allreduce\":\"gloo\""), std::string::npos) << r.out;
  EXPECT_EQ(Field(r.last_line(), "steps"), 3);
}

TEST(FramewormTrainTest, TorchrunStyleEnvironment) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  Result ok = RunTrain("--model=mlp --dataset=synthetic --max-steps=3",
                       "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(*port) +
                           " RANK=0 WORLD_SIZE=1 LOCAL_RANK=0");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(Field(ok.last_line(), "steps"), 3);
  // One rank of a world of one, started with torchrun's variables.
  Result r = RunTrain("--model=mlp --dataset=synthetic --max-steps=3",
                 "MASTER_ADDR=127.0.0.1 MASTER_PORT=0 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0");
  EXPECT_EQ(r.code, 1);  // port 0 is malformed and named
  EXPECT_NE(r.err.find("MASTER_PORT"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace frameworm
