// P11: what in-memory checkpoints at the automatic cadence cost training
// (issue #10: the default cadence keeps the snapshots at about 2% of the
// step time). One process, one torch thread, one training run per round,
// in alternating blocks of --block steps: in an "on" block in-memory
// checkpoints come at the automatic cadence into --dir (a tmpfs such as
// /dev/shm; the newest two kept, as the coordinator keeps them), except in
// its last quarter (so the last save's cost stays in its block); in an
// "off" block none start. Alternating blocks of a few seconds cancel the
// machine's drift, which separate runs do not. A step's time is the wall
// time from its on_step to the one before (a snapshot's blocking and the
// copy and write beside the next steps count); the first --warmup steps
// are left out, and a short untimed run comes first. Per round, one JSON
// line:
//   off_mean_step_s, on_mean_step_s   mean step in off and on blocks
//   saves, spacing                    saves in on blocks; steps between
//                                     two saves of one block (the cadence)
//   extra_per_save_s                  (on blocks' time - their steps x the
//                                     off mean) / saves
//   share                             extra_per_save_s / (spacing x off
//                                     mean): the cadence's cost to
//                                     training (target <= 0.02)
// Models: cnn (the demo's, on Fashion-MNIST from --data, batch 64), wide
// (Linear(2048, 2048) layers up to --mib MiB, SGD with momentum, on random
// rows, batch 16). Usage:
//   p11_memory_cadence --dir=DIR [--model=cnn|wide] [--mib=256] [--steps=400]
//                      [--block=60] [--rounds=3] [--warmup=20]
//                      [--data=/usr/share/datasets/fashion-mnist]
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "train/data.h"
#include "train/models.h"
#include "train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

// Removes the files directly in `dir`, then `dir` (libtorch carries its own
// std::filesystem::remove_all, which the dynamic linker may pick).
void RemoveFlatDir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

struct Run {
  double off_mean_step_s = 0;
  double on_mean_step_s = 0;
  int saves = 0;
  double spacing = 0;
  double extra_per_save_s = 0;
  double share = 0;
  double checkpoint_mib = 0;
};

struct Setup {
  std::string model = "cnn";
  int64_t mib = 256;
  int64_t steps = 400;
  int64_t block = 60;
  int64_t warmup = 20;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string dir;
};

absl::StatusOr<Run> TrainOnce(const Setup& s, const frameworm::Dataset& data, int round) {
  torch::manual_seed(42);
  torch::nn::Sequential model;
  int64_t batch = 64;
  if (s.model == "cnn") {
    model = frameworm::MakeCnn();
  } else {
    for (int64_t i = 0; i < std::max<int64_t>(1, s.mib / 16); ++i) {
      model->push_back(torch::nn::Linear(2048, 2048));
    }
    batch = 16;
  }
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(1e-3).momentum(0.9));
  frameworm::TrainerOptions o;
  o.verbose = false;
  o.epochs = 1000;
  o.max_steps = s.steps;
  o.metrics = {};
  const std::string mem = absl::StrCat(s.dir, "/round", round);
  o.memory_checkpoint_dir = mem;
  o.memory_checkpoint_every = -1;  // automatic
  // Block of a step after the warm-up (-1: warm-up), and whether it is on.
  auto block_of = [&](int64_t step) { return step <= s.warmup ? -1 : (step - s.warmup - 1) / s.block; };
  double on_time = 0, off_time = 0;
  int64_t on_steps = 0, off_steps = 0;
  std::map<int64_t, std::vector<int64_t>> saves_by_block;
  Run run;
  frameworm::Trainer* trainer = nullptr;
  Clock::time_point last{};
  o.on_step = [&](const frameworm::StepInfo& info) -> absl::StatusOr<frameworm::StepAction> {
    const Clock::time_point now = Clock::now();
    const int64_t b = block_of(info.step);
    if (b >= 0) {
      const double gap = std::chrono::duration<double>(now - last).count();
      if (b % 2 == 0) {
        on_time += gap;
        ++on_steps;
      } else {
        off_time += gap;
        ++off_steps;
      }
    }
    last = now;
    // Whether a save may start after this step: in the warm-up, and in the
    // first three quarters of an on block.
    const int64_t at = info.step - s.warmup - 1;  // this step's place in its block
    const bool allow = b < 0 || (b % 2 == 0 && (at % s.block) < s.block * 3 / 4);
    trainer->options().memory_checkpoint_every = allow ? -1 : 0;
    return frameworm::StepAction{};
  };
  std::deque<std::string> kept;
  o.on_checkpoint = [&](int64_t step, const std::string& path,
                        const frameworm::CheckpointFileInfo& i) {
    saves_by_block[block_of(step)].push_back(step);
    run.checkpoint_mib = static_cast<double>(i.bytes) / (1 << 20);
    kept.push_back(path);
    while (kept.size() > 2) {
      ::unlink(kept.front().c_str());
      kept.pop_front();
    }
  };
  frameworm::Trainer t(model, opt, torch::kCPU, o);
  trainer = &t;
  frameworm::DataLoader train(data, {batch, true, 7, false});
  frameworm::DataLoader val(frameworm::Dataset{data.images.slice(0, 0, batch),
                                               data.labels.slice(0, 0, batch), {}},
                            {batch, false, 0, false});
  if (absl::Status st = t.train(train, val); !st.ok()) return st;
  RemoveFlatDir(mem);
  if (on_steps == 0 || off_steps == 0) {
    return absl::InvalidArgumentError("no on or off block: raise --steps or lower --block");
  }
  run.off_mean_step_s = off_time / off_steps;
  run.on_mean_step_s = on_time / on_steps;
  double spacing_sum = 0;
  int spacing_n = 0;
  for (const auto& [b, steps] : saves_by_block) {
    if (b < 0) continue;
    run.saves += static_cast<int>(steps.size());
    for (size_t i = 1; i < steps.size(); ++i) {
      spacing_sum += static_cast<double>(steps[i] - steps[i - 1]);
      ++spacing_n;
    }
  }
  // No two saves in one block: the cadence is at least a block's three
  // quarters apart.
  run.spacing = spacing_n ? spacing_sum / spacing_n : static_cast<double>(s.block * 3 / 4);
  if (run.saves > 0) {
    run.extra_per_save_s = (on_time - on_steps * run.off_mean_step_s) / run.saves;
    run.share = run.extra_per_save_s / (run.spacing * run.off_mean_step_s);
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  int64_t rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--dir=", 0) == 0) {
      s.dir = a.substr(6);
    } else if (a == "--model=cnn" || a == "--model=wide") {
      s.model = a.substr(8);
    } else if (a.rfind("--data=", 0) == 0) {
      s.data = a.substr(7);
    } else if (a.rfind("--mib=", 0) == 0 && absl::SimpleAtoi(a.substr(6), &s.mib) && s.mib > 0) {
    } else if (a.rfind("--steps=", 0) == 0 && absl::SimpleAtoi(a.substr(8), &s.steps) &&
               s.steps > 0) {
    } else if (a.rfind("--rounds=", 0) == 0 && absl::SimpleAtoi(a.substr(9), &rounds) &&
               rounds > 0) {
    } else if (a.rfind("--block=", 0) == 0 && absl::SimpleAtoi(a.substr(8), &s.block) &&
               s.block >= 4) {
    } else if (a.rfind("--warmup=", 0) == 0 && absl::SimpleAtoi(a.substr(9), &s.warmup) &&
               s.warmup >= 0) {
    } else {
      std::fprintf(stderr, "p11_memory_cadence: bad argument '%s' (--dir=DIR --model=cnn|wide "
                   "--mib=N --steps=N --block=N --rounds=N --warmup=N --data=DIR)\n", a.c_str());
      return 2;
    }
  }
  if (s.dir.empty()) {
    std::fprintf(stderr, "p11_memory_cadence: --dir is required\n");
    return 2;
  }
  if (s.warmup + 2 * s.block > s.steps) {
    std::fprintf(stderr, "p11_memory_cadence: --steps must hold --warmup and two --block\n");
    return 2;
  }
  torch::set_num_threads(1);
  frameworm::Dataset data;
  if (s.model == "cnn") {
    auto d = frameworm::LoadFashionMnist(s.data, "train");
    if (!d.ok()) {
      std::fprintf(stderr, "p11_memory_cadence: %s\n", d.status().ToString().c_str());
      return 1;
    }
    data = *std::move(d);
  } else {
    torch::manual_seed(7);
    const int64_t rows = 16 * 256;
    data.images = torch::randn({rows, 2048});
    data.labels = torch::randint(0, 2048, {rows}, torch::kLong);
  }
  {
    // The process's first run is slower throughout (allocations, caches,
    // the CPU's clock): a short one first, untimed.
    Setup warm = s;
    warm.steps = s.warmup + 2 * s.block;
    if (absl::StatusOr<Run> run = TrainOnce(warm, data, 0); !run.ok()) {
      std::fprintf(stderr, "p11_memory_cadence: warm-up: %s\n", run.status().ToString().c_str());
      return 1;
    }
  }
  for (int64_t r = 1; r <= rounds; ++r) {
    absl::StatusOr<Run> run = TrainOnce(s, data, static_cast<int>(r));
    if (!run.ok()) {
      std::fprintf(stderr, "p11_memory_cadence: round %lld: %s\n", static_cast<long long>(r),
                   run.status().ToString().c_str());
      return 1;
    }
    std::printf("{\"round\":%lld,\"model\":\"%s\",\"block\":%lld,\"off_mean_step_s\":%.6f,"
                "\"on_mean_step_s\":%.6f,\"saves\":%d,\"spacing\":%.1f,"
                "\"extra_per_save_s\":%.6f,\"share\":%.5f,\"checkpoint_mib\":%.1f}\n",
                static_cast<long long>(r), s.model.c_str(), static_cast<long long>(s.block),
                run->off_mean_step_s, run->on_mean_step_s, run->saves, run->spacing,
                run->extra_per_save_s, run->share, run->checkpoint_mib);
    std::fflush(stdout);
  }
  return 0;
}
