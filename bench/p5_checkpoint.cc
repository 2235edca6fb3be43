// P5: how long a checkpoint blocks training, synchronous against
// asynchronous, for one synthetic model of --mib MiB of parameters (on
// --device: cpu, or cuda, where the snapshot copies into pinned host
// memory; SGD with momentum, so the optimizer state is as large again), in
// the same process and on the same disk. One JSON line per trial:
//   sync_block_s    save_checkpoint (rank 0 serializes, checksums, writes,
//                   fsyncs, renames: training waits for all of it)
//   async_block_s   how long the asynchronous save held training: the
//                   save_checkpoint_async call (buffers, RNG; with the
//                   default checkpoint_copy_during_step the parameters and
//                   optimizer state are copied during the next step) plus
//                   the time that next step's optimizer update waited for
//                   the copy (copy_wait_s)
//   async_cost_s    the call plus how much longer the next training step
//                   (--batch rows) took than the step before it: the
//                   blocking and what the background copy and write took
//                   from the step by sharing the cores and memory
//   step_s          that step before, without a save
//   async_write_s   from its return until the file is durable (background)
// (odd trials save synchronously first, even ones asynchronously first; each
// save goes to a new file, the previous trial's are removed untimed)
// (the first asynchronous save, which allocates the snapshot's memory, is
// untimed in the trials and reported as first_async_block_s)
//   bytes           the checkpoint file's size
// then a summary line with the medians. Usage:
//   p5_checkpoint --dir=DIR [--mib=512] [--trials=3] [--device=cpu|cuda] [--batch=16]
//                 [--copy-during-step=true|false]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "train/trainer.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int64_t mib = 512, trials = 3, batch = 16;
  bool copy_during_step = true;
  std::string device_name = "cpu";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--dir=", 0) == 0) {
      dir = a.substr(6);
    } else if (a == "--device=cpu" || a == "--device=cuda") {
      device_name = a.substr(9);
    } else if (a.rfind("--mib=", 0) == 0 && absl::SimpleAtoi(a.substr(6), &mib) && mib > 0) {
    } else if (a.rfind("--trials=", 0) == 0 && absl::SimpleAtoi(a.substr(9), &trials) &&
               trials > 0) {
    } else if (a.rfind("--batch=", 0) == 0 && absl::SimpleAtoi(a.substr(8), &batch) &&
               batch > 0) {
    } else if (a == "--copy-during-step=true" || a == "--copy-during-step=false") {
      copy_during_step = a == "--copy-during-step=true";
    } else {
      std::fprintf(stderr, "p5_checkpoint: bad argument '%s' (--dir=DIR --mib=N --trials=N "
                   "--device=cpu|cuda --batch=N --copy-during-step=true|false)\n",
                   a.c_str());
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "p5_checkpoint: --dir is required\n");
    return 2;
  }
  if (device_name == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "p5_checkpoint: --device=cuda but torch sees no CUDA device\n");
    return 2;
  }
  const torch::Device device = device_name == "cuda" ? torch::Device(torch::kCUDA, 0)
                                                     : torch::Device(torch::kCPU);
  torch::set_num_threads(1);
  torch::manual_seed(0);
  // Square 2048x2048 layers (16 MiB of float each) up to --mib.
  const int64_t layers = std::max<int64_t>(1, mib / 16);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < layers; ++i) model->push_back(torch::nn::Linear(2048, 2048));
  model->to(device);
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(1e-4).momentum(0.9));
  {  // one step, so the momentum buffers exist
    auto loss = model->forward(torch::randn({2, 2048}, device)).sum();
    loss.backward();
    opt->step();
  }
  frameworm::TrainerOptions o;
  o.verbose = false;
  o.checkpoint_copy_during_step = copy_during_step;
  frameworm::Trainer t(model, opt, device, o);
  // A training step on --batch random rows (targets: classes of the last
  // layer's 2048 outputs), timed; false when it fails.
  const frameworm::Batch step_batch{torch::randn({batch, 2048}),
                                    torch::randint(0, 2048, {batch}, torch::kLong)};
  auto train_step = [&](double* seconds) -> bool {
    const auto s0 = std::chrono::steady_clock::now();
    auto info = t.train_step({step_batch});
    *seconds = Seconds(s0, std::chrono::steady_clock::now());
    if (!info.ok()) std::fprintf(stderr, "p5_checkpoint: step: %s\n", info.status().ToString().c_str());
    return info.ok();
  };
  double warm_step = 0;
  if (!train_step(&warm_step)) return 1;
  std::vector<double> sync_block, async_block, async_cost, async_write, plain_step;
  int64_t bytes = 0;
  // A new file per save, as ckpt-<step>.pt are (the previous trial's files
  // are removed between trials, untimed, as retention would).
  auto path_of = [&](const char* kind, int64_t n) {
    return absl::StrCat(dir, "/ckpt-", kind, "-", n, ".pt");
  };
  // The first asynchronous save allocates the snapshot's memory (page
  // faults); later ones copy into it. Reported apart, not in the medians.
  double first_async_block_s = 0;
  {
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = t.save_checkpoint_async(path_of("warm", 0), 0);
    t.wait_for_snapshot();
    first_async_block_s = Seconds(t0, std::chrono::steady_clock::now());
    if (s.ok()) s = t.wait_for_checkpoint();
    if (!s.ok()) {
      std::fprintf(stderr, "p5_checkpoint: first async save: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  for (int64_t trial = 1; trial <= trials; ++trial) {
    std::remove(path_of("warm", 0).c_str());
    std::remove(path_of("sync", trial - 1).c_str());
    std::remove(path_of("async", trial - 1).c_str());
    std::chrono::steady_clock::time_point t0, t1, t2, t3, t4;
    double before = 0, after = 0, waited = 0;
    auto run_sync = [&]() -> bool {
      t0 = std::chrono::steady_clock::now();
      auto info = t.save_checkpoint(path_of("sync", trial));
      t1 = std::chrono::steady_clock::now();
      if (!info.ok()) {
        std::fprintf(stderr, "p5_checkpoint: sync save: %s\n", info.status().ToString().c_str());
        return false;
      }
      bytes = info->bytes;
      return true;
    };
    int64_t async_bytes = 0;
    auto run_async = [&]() -> bool {
      t.options().on_checkpoint = [&](int64_t, const std::string&,
                                      const frameworm::CheckpointFileInfo& i) {
        async_bytes = i.bytes;
      };
      if (!train_step(&before)) return false;
      t2 = std::chrono::steady_clock::now();
      absl::Status s = t.save_checkpoint_async(path_of("async", trial), trial);
      t3 = std::chrono::steady_clock::now();
      const double waited0 = t.snapshot_wait_seconds();
      if (s.ok() && !train_step(&after)) return false;
      waited = t.snapshot_wait_seconds() - waited0;
      if (s.ok()) s = t.wait_for_checkpoint();
      t4 = std::chrono::steady_clock::now();
      t.options().on_checkpoint = nullptr;
      if (!s.ok()) {
        std::fprintf(stderr, "p5_checkpoint: async save: %s\n", s.ToString().c_str());
        return false;
      }
      return true;
    };
    // Alternate which goes first, so neither always follows the other's
    // write-back.
    const bool ok = trial % 2 ? (run_sync() && run_async()) : (run_async() && run_sync());
    if (!ok) return 1;
    // On a GPU the synchronous file holds the live (cuda:0) tensors and the
    // asynchronous one their host copies ("cpu"): the archives differ by the
    // device names, a few bytes per tensor, not in what they hold.
    const int64_t tensors = 4 * layers;  // weights, biases, their momentum
    const int64_t off = async_bytes > bytes ? async_bytes - bytes : bytes - async_bytes;
    if (device.is_cpu() ? off != 0 : off > 8 * tensors) {
      std::fprintf(stderr, "p5_checkpoint: async file %lld bytes, sync %lld\n",
                   static_cast<long long>(async_bytes), static_cast<long long>(bytes));
      return 1;
    }
    sync_block.push_back(Seconds(t0, t1));
    async_block.push_back(Seconds(t2, t3) + waited);
    async_cost.push_back(Seconds(t2, t3) + std::max(0.0, after - before));
    async_write.push_back(Seconds(t3, t4));
    plain_step.push_back(before);
    std::printf(
        "{\"trial\": %lld, \"bytes\": %lld, \"sync_block_s\": %.4f, \"async_block_s\": %.4f, "
        "\"async_call_s\": %.4f, \"copy_wait_s\": %.4f, \"async_cost_s\": %.4f, "
        "\"step_s\": %.4f, \"step_after_save_s\": %.4f, \"async_write_s\": %.4f}\n",
        static_cast<long long>(trial), static_cast<long long>(bytes), sync_block.back(),
        async_block.back(), Seconds(t2, t3), waited, async_cost.back(), before, after,
        async_write.back());
    std::fflush(stdout);
  }
  std::printf(
      "{\"summary\": true, \"device\": \"%s\", \"layers\": %lld, \"param_mib\": %lld, \"bytes\": %lld, "
      "\"sync_block_s\": %.4f, \"async_block_s\": %.4f, \"async_cost_s\": %.4f, "
      "\"async_write_s\": %.4f, "
      "\"first_async_block_s\": %.4f, \"snapshot_threads\": %u, \"step_s\": %.4f, "
      "\"batch\": %lld, \"copy_during_step\": %s}\n",
      device_name.c_str(), static_cast<long long>(layers), static_cast<long long>(layers * 16),
      static_cast<long long>(bytes), Median(sync_block), Median(async_block), Median(async_cost),
      Median(async_write),
      first_async_block_s, std::min(copy_during_step ? 2u : 4u, std::max(1u, std::thread::hardware_concurrency())),
      Median(plain_step), static_cast<long long>(batch), copy_during_step ? "true" : "false");
  std::remove(path_of("sync", trials).c_str());
  std::remove(path_of("async", trials).c_str());
  return 0;
}
