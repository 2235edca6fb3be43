#include "train/trainer.h"

#include "common/private_dir.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status FromTorch(const std::exception& e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}


// Nine significant digits: enough to compare loss curves against a peer at 1e-6.
std::string Fmt(double v) { return absl::StrFormat("%.9g", v); }

}  // namespace

// ---------------------------------------------------------------- Trainer

Trainer::Trainer(Model model,
                 std::shared_ptr<torch::optim::Optimizer> optimizer,
                 torch::Device device, TrainerOptions options)
    : model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      device_(device),
      options_(std::move(options)) {
  model_.ptr()->to(device_);
  for (auto& g : optimizer_->param_groups()) base_lr_.push_back(g.options().get_lr());
}

void Trainer::ScaleBaseLr(double factor) {
  for (auto& lr : base_lr_) lr *= factor;
}

namespace {
double WarmupFactor(int64_t step, int64_t warmup) {
  if (warmup > 0 && step < warmup) {
    return static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  return 1.0;
}
}  // namespace

double Trainer::lr_at(int64_t step) const {
  return (base_lr_.empty() ? 0.0 : base_lr_[0]) * WarmupFactor(step, options_.warmup_steps);
}

double Trainer::collective_wait_seconds() const {
  const int64_t since = waiting_since_ns_.load(std::memory_order_relaxed);
  if (since == 0) return 0;
  return std::chrono::duration<double>(Clock::now().time_since_epoch() -
                                       Clock::duration(since)).count();
}

absl::StatusOr<StepInfo> Trainer::train_step(const std::vector<Batch>& mbs) {
  if (mbs.empty()) return absl::InvalidArgumentError("train_step: no batches");
  const auto t0 = Clock::now();
  try {
    auto module = model_.ptr();
    module->train();
    optimizer_->zero_grad();
    const double f = WarmupFactor(state_.step, options_.warmup_steps);
    auto& groups = optimizer_->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(base_lr_[g] * f);
    int64_t total = 0;
    for (const auto& b : mbs) total += b.size();
    double loss_sum = 0;
    double wait = 0;
    int64_t correct = 0;
    for (size_t i = 0; i < mbs.size(); ++i) {
      const bool last = i + 1 == mbs.size();
      PrepareBackward(last);
      torch::Tensor x = mbs[i].data.to(device_);
      torch::Tensor y = mbs[i].target.to(device_);
      torch::Tensor out = model_.forward(x);
      torch::Tensor loss = torch::nn::functional::cross_entropy(out, y);
      if (mbs.size() == 1) {
        loss.backward();  // the common case: no scaling kernel on the hot path
      } else {
        (loss * (static_cast<double>(mbs[i].size()) / total)).backward();
      }
      const auto w0 = Clock::now();
      waiting_since_ns_.store(w0.time_since_epoch().count(), std::memory_order_relaxed);
      absl::Status s = FinishBackward(last);
      waiting_since_ns_.store(0, std::memory_order_relaxed);
      wait += std::chrono::duration<double>(Clock::now() - w0).count();
      if (!s.ok()) return s;
      loss_sum += loss.item<double>() * mbs[i].size();
      correct += out.argmax(1).eq(y).sum().item<int64_t>();
    }
    optimizer_->step();
    ++state_.step;
    StepInfo info;
    info.step = state_.step;
    info.epoch = state_.epoch;
    info.samples = total;
    info.loss = loss_sum / total;
    info.accuracy = static_cast<double>(correct) / total;
    info.lr = lr_at(state_.step - 1);
    info.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    info.wait_seconds = std::min(wait, info.seconds);
    return info;
  } catch (const std::exception& e) {
    return FromTorch(e, "training step failed");
  }
}

absl::StatusOr<std::map<std::string, double>> Trainer::evaluate(DataLoader& loader) {
  std::vector<double> sums(3, 0.0);
  try {
    auto module = model_.ptr();
    module->eval();
    torch::NoGradGuard ng;
    const int64_t nb = loader.num_batches();
    for (int64_t i = 0; i < nb; ++i) {
      if (options_.on_progress) options_.on_progress();
      Batch b = loader.batch(i);
      torch::Tensor x = b.data.to(device_), y = b.target.to(device_);
      torch::Tensor out = model_.forward(x);
      sums[0] += torch::nn::functional::cross_entropy(
                     out, y,
                     torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                     .item<double>();
      sums[1] += out.argmax(1).eq(y).sum().item<int64_t>();
      sums[2] += b.size();
    }
    module->train();
  } catch (const std::exception& e) {
    return FromTorch(e, "evaluation failed");
  }
  auto g = AllreduceSum(sums);
  if (!g.ok()) return g.status();
  std::map<std::string, double> m;
  const double n = std::max(1.0, (*g)[2]);
  m["loss"] = (*g)[0] / n;
  m["accuracy"] = (*g)[1] / n;
  m["samples"] = (*g)[2];
  return m;
}

std::string Trainer::CheckpointPath(int64_t step) const {
  const std::string dir = options_.checkpoint_dir.empty() ? "." : options_.checkpoint_dir;
  return absl::StrCat(dir, "/ckpt-", step, ".pt");
}

absl::StatusOr<bool> Trainer::AfterStep(const StepInfo& info) {
  StepAction a;
  if (options_.on_step) {
    auto r = options_.on_step(info);
    if (!r.ok()) return r.status();
    a = *r;
  }
  if (options_.sync_step_actions && world_size() > 1) {
    auto v = BroadcastFromRank0({a.checkpoint ? 1 : 0, a.stop ? 1 : 0});
    if (!v.ok()) return v.status();
    a.checkpoint = (*v)[0] != 0;
    a.stop = (*v)[1] != 0;
  }
  if (options_.checkpoint_every > 0 && info.step % options_.checkpoint_every == 0) {
    a.checkpoint = true;
  }
  if (a.checkpoint) {
    absl::Status s = CheckpointAt(info.step);
    if (!s.ok()) return s;
  } else {
    absl::Status s = MaybeMemoryCheckpoint(info);
    if (!s.ok()) return s;  // the save before it failed
  }
  // A background save that failed (not for a full disk) ends training here.
  absl::Status failed = CheckpointFailure();
  if (!failed.ok()) return failed;
  return a.stop;
}

bool Trainer::IsMemoryPath(const std::string& path) const {
  return !options_.memory_checkpoint_dir.empty() &&
         path.rfind(options_.memory_checkpoint_dir + "/", 0) == 0;
}

absl::Status Trainer::MaybeMemoryCheckpoint(const StepInfo& info) {
  mean_step_seconds_ = mean_step_seconds_ == 0 ? info.seconds
                                               : 0.9 * mean_step_seconds_ + 0.1 * info.seconds;
  const int64_t every = options_.memory_checkpoint_every;
  if (rank() != 0 || every == 0 || options_.memory_checkpoint_dir.empty() ||
      !options_.async_checkpoint) {
    return absl::OkStatus();
  }
  const bool due = every > 0 ? info.step % every == 0 : info.step >= next_memory_step_;
  if (!due || ckpt_busy_.load()) return absl::OkStatus();  // never waits for a save in flight
  // The save before this one ended: its failure (a disk checkpoint's) ends
  // training, as it would at the next step.
  if (absl::Status previous = wait_for_checkpoint(); !previous.ok()) return previous;
  if (!memory_temps_cleaned_) {
    // A shared tmpfs: the directories must be this user's alone.
    const std::string root =
        std::filesystem::path(options_.memory_checkpoint_dir).parent_path().string();
    absl::Status mine = EnsurePrivateDirectory(root);
    if (mine.ok()) mine = EnsurePrivateDirectory(options_.memory_checkpoint_dir);
    if (!mine.ok()) {
      std::cerr << "frameworm: in-memory checkpoints are off: " << mine.message() << "\n";
      options_.memory_checkpoint_every = 0;
      return absl::OkStatus();
    }
    RemoveStaleCheckpointTemps(options_.memory_checkpoint_dir);
    memory_temps_cleaned_ = true;
  }
  const std::string path =
      absl::StrCat(options_.memory_checkpoint_dir, "/ckpt-", info.step, ".pt");
  absl::Status s = save_checkpoint_async(path, info.step);
  if (!s.ok()) {
    std::cerr << "frameworm: in-memory checkpoint of step " << info.step << " skipped: " << s
              << "\n";
  }
  if (every < 0) {
    const double budget = 0.02 * std::max(mean_step_seconds_, 1e-6);
    next_memory_step_ =
        info.step + std::max<int64_t>(10, static_cast<int64_t>(std::ceil(take_seconds_ / budget)));
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckpointAt(int64_t step) {
  if (options_.on_progress) options_.on_progress();
  const std::string path = CheckpointPath(step);
  if (options_.async_checkpoint) return save_checkpoint_async(path, step);
  return Finished(rank() == 0, step, path, save_checkpoint(path));
}

absl::Status Trainer::Finished(bool rank0, int64_t step, const std::string& path,
                               const absl::StatusOr<CheckpointFileInfo>& result) {
  if (!rank0) {  // a full disk on rank 0 is skipped on every rank
    return result.status().code() == absl::StatusCode::kResourceExhausted ? absl::OkStatus()
                                                                          : result.status();
  }
  if (!result.ok() && IsMemoryPath(path)) {  // memory checkpoints are best effort
    std::cerr << absl::StrCat("frameworm: in-memory checkpoint of step ", step,
                              " skipped, training goes on: ", result.status().message(), "\n");
    return absl::OkStatus();
  }
  if (result.ok()) {
    if (options_.verbose) {
      std::cout << absl::StrCat("{\"event\":\"checkpoint\",\"step\":", step, ",\"path\":\"",
                                path, "\",\"bytes\":", result->bytes, ",\"checksum\":\"",
                                result->checksum, "\"}\n")
                << std::flush;
    }
    if (options_.on_checkpoint) options_.on_checkpoint(step, path, *result);
    return absl::OkStatus();
  }
  // A full disk costs this checkpoint, not the run: the previous one stays
  // complete (the write went to a temporary file, now removed) and
  // training goes on.
  if (result.status().code() == absl::StatusCode::kResourceExhausted) {
    {
      std::lock_guard<std::mutex> l(ckpt_mu_);
      skipped_step_ = step;
    }
    std::cout << absl::StrCat("{\"event\":\"checkpoint_skipped\",\"step\":", step,
                              ",\"reason\":\"disk full\"}\n")
              << std::flush;
    std::cerr << absl::StrCat("frameworm: checkpoint of step ", step,
                              " skipped, training goes on: ", result.status().message(), "\n");
    if (options_.on_checkpoint_skipped) {
      options_.on_checkpoint_skipped(step, std::string(result.status().message()));
    }
    return absl::OkStatus();
  }
  return result.status();
}

absl::Status Trainer::save_checkpoint_async(const std::string& path, int64_t step) {
  if (rank() != 0) return absl::OkStatus();
  absl::Status previous = wait_for_checkpoint();
  if (!previous.ok()) return previous;
  if (!temps_cleaned_ && !options_.checkpoint_dir.empty()) {
    RemoveStaleCheckpointTemps(options_.checkpoint_dir);  // writers killed mid-write
    temps_cleaned_ = true;
  }
  std::unique_ptr<CheckpointSnapshot> spare;
  {
    std::lock_guard<std::mutex> l(ckpt_mu_);
    spare = std::move(ckpt_spare_);
  }
  const auto taken = std::chrono::steady_clock::now();
  auto snap = CheckpointSnapshot::Take(*model_.ptr(), *optimizer_, Position(), /*freeze=*/true,
                                       std::move(spare));
  take_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - taken).count();
  if (!snap.ok()) return snap.status();
  ckpt_busy_ = true;
  ckpt_thread_ = std::thread([this, step, path, s = std::move(*snap)]() mutable {
    absl::StatusOr<CheckpointFileInfo> written = s->WriteTo(path);
    {
      std::lock_guard<std::mutex> l(ckpt_mu_);
      ckpt_spare_ = std::move(s);  // the next snapshot copies into its memory
    }
    absl::Status kept = Finished(/*rank0=*/true, step, path, written);
    {
      std::lock_guard<std::mutex> l(ckpt_mu_);
      if (!kept.ok() && ckpt_error_.ok()) ckpt_error_ = kept;
    }
    ckpt_busy_ = false;
  });
  return absl::OkStatus();
}

absl::Status Trainer::wait_for_checkpoint() {
  if (ckpt_thread_.joinable()) ckpt_thread_.join();
  return CheckpointFailure();
}

absl::Status Trainer::CheckpointFailure() {
  std::lock_guard<std::mutex> l(ckpt_mu_);
  absl::Status e = ckpt_error_;
  ckpt_error_ = absl::OkStatus();
  return e;
}

Trainer::~Trainer() {
  if (ckpt_thread_.joinable()) ckpt_thread_.join();
}

CheckpointPosition Trainer::Position() const {
  CheckpointPosition p;
  p.epoch = state_.epoch;
  p.step = state_.step;
  p.batch_in_epoch = state_.batch_in_epoch;
  p.world_size = world_size();
  return p;
}

absl::Status Trainer::train(DataLoader& train_loader, DataLoader& val_loader) {
  try {
    return TrainImpl(train_loader, val_loader);
  } catch (const std::exception& e) {
    return FromTorch(e, "training failed");
  }
}

absl::Status Trainer::TrainImpl(DataLoader& train_loader, DataLoader& val_loader) {
  PrepareLoaders(train_loader, val_loader);
  const int accum = std::max(1, options_.gradient_accumulation_steps);
  bool stop = false;
  bool evaluated = false;
  const bool talk = rank() == 0 && options_.verbose;
  while (!stop && state_.epoch < options_.epochs) {
    if (options_.max_steps > 0 && state_.step >= options_.max_steps) break;
    const auto t0 = Clock::now();
    train_loader.set_epoch(state_.epoch);
    const int64_t nb = train_loader.num_batches();
    std::vector<double> sums(3, 0.0);  // loss*n, correct, n
    while (state_.batch_in_epoch < nb) {
      if (options_.max_steps > 0 && state_.step >= options_.max_steps) {
        stop = true;
        break;
      }
      std::vector<Batch> mbs;
      const int64_t k = std::min<int64_t>(accum, nb - state_.batch_in_epoch);
      const auto d0 = Clock::now();
      for (int64_t i = 0; i < k; ++i) mbs.push_back(train_loader.batch(state_.batch_in_epoch + i));
      const double data_seconds = std::chrono::duration<double>(Clock::now() - d0).count();
      auto info = train_step(mbs);
      if (!info.ok()) return info.status();
      info->data_seconds = data_seconds;
      evaluated = false;
      state_.batch_in_epoch += k;
      sums[0] += info->loss * info->samples;
      sums[1] += info->accuracy * info->samples;
      sums[2] += info->samples;
      if (talk && options_.log_every > 0 && state_.step % options_.log_every == 0) {
        std::cout << "{\"event\":\"step\",\"epoch\":" << state_.epoch + 1
                  << ",\"step\":" << state_.step << ",\"loss\":" << Fmt(info->loss)
                  << ",\"accuracy\":" << Fmt(info->accuracy) << ",\"lr\":" << Fmt(info->lr)
                  << ",\"step_seconds\":" << Fmt(info->seconds) << "}" << std::endl;
      }
      auto st = AfterStep(*info);
      if (!st.ok()) return st.status();
      if (*st) {
        stop = true;
        break;
      }
    }
    auto g = AllreduceSum(sums);
    if (!g.ok()) return g.status();
    if ((*g)[2] > 0) {
      state_.train_metrics["loss"] = (*g)[0] / (*g)[2];
      state_.train_metrics["accuracy"] = (*g)[1] / (*g)[2];
      state_.train_metrics["samples"] = (*g)[2];
    }
    const bool epoch_done = state_.batch_in_epoch >= nb;
    if (!epoch_done) break;
    auto v = evaluate(val_loader);
    if (!v.ok()) return v.status();
    state_.val_metrics = *v;
    evaluated = true;
    ++state_.epoch;
    state_.batch_in_epoch = 0;
    if (talk) {
      std::cout << "{\"event\":\"epoch\",\"epoch\":" << state_.epoch
                << ",\"steps\":" << state_.step
                << ",\"train_loss\":" << Fmt(state_.train_metrics["loss"])
                << ",\"train_accuracy\":" << Fmt(state_.train_metrics["accuracy"])
                << ",\"val_loss\":" << Fmt(state_.val_metrics["loss"])
                << ",\"val_accuracy\":" << Fmt(state_.val_metrics["accuracy"])
                << ",\"seconds\":"
                << Fmt(std::chrono::duration<double>(Clock::now() - t0).count())
                << "}" << std::endl;
    }
  }
  if (!evaluated) {
    auto v = evaluate(val_loader);
    if (!v.ok()) return v.status();
    state_.val_metrics = *v;
  }
  // With periodic checkpoints on, the finished model is always kept too.
  const bool final_checkpoint = options_.checkpoint_every > 0 && state_.step > 0 &&
                                state_.step % options_.checkpoint_every != 0;
  if (final_checkpoint) {
    absl::Status s = CheckpointAt(state_.step);
    if (!s.ok()) return s;
  }
  absl::Status last = wait_for_checkpoint();  // the last save is durable (and reported)
  if (!last.ok()) return last;
  // The finished model is not skipped for a full disk: that fails the rank
  // (its restart resumes from the previous checkpoint and tries again).
  std::lock_guard<std::mutex> l(ckpt_mu_);
  if (final_checkpoint && skipped_step_ == state_.step) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the final checkpoint of step ", state_.step, " could not be written: the disk is full"));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------ checkpoints

absl::StatusOr<CheckpointFileInfo> Trainer::save_checkpoint(const std::string& path) {
  absl::Status write_status = wait_for_checkpoint();
  CheckpointFileInfo info;
  if (rank() == 0 && write_status.ok()) {
    auto snap = CheckpointSnapshot::Take(*model_.ptr(), *optimizer_, Position(), /*freeze=*/false);
    absl::StatusOr<CheckpointFileInfo> w = snap.ok() ? (*snap)->WriteTo(path)
                                                     : absl::StatusOr<CheckpointFileInfo>(snap.status());
    if (w.ok()) {
      info = *w;
    } else {
      write_status = w.status();
    }
  }
  // The barrier: every rank waits for rank 0's outcome (1 written, 2 its
  // disk is full, 0 another failure).
  const int outcome = write_status.ok() ? 1
                      : write_status.code() == absl::StatusCode::kResourceExhausted ? 2
                                                                                     : 0;
  auto flag = BroadcastFromRank0({outcome});
  if (!flag.ok()) return flag.status();
  if (!write_status.ok()) return write_status;
  if ((*flag)[0] == 2) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rank 0's disk is full writing checkpoint ", path));
  }
  if ((*flag)[0] == 0) {
    return absl::AbortedError(absl::StrCat("rank 0 failed to write checkpoint ", path));
  }
  return info;
}

absl::Status Trainer::load_checkpoint(const std::string& path) {
  auto payload = ReadCheckpointFile(path);
  if (!payload.ok()) return payload.status();
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(payload->data(), payload->size(), device_);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " cannot be parsed: ", e.what()));
  }
  auto module = model_.ptr();
  auto params = module->named_parameters(true);
  auto buffers = module->named_buffers(true);
  std::vector<torch::Tensor> pt, bt;
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, " does not fit this trainer: ", what));
  };
  try {
    for (const auto& p : params) {
      torch::Tensor t;
      if (!ar.try_read("model/param/" + p.key(), t)) return bad("missing parameter " + p.key());
      if (t.sizes() != p.value().sizes()) {
        return bad(absl::StrCat("parameter ", p.key(), " has shape ",
                                c10::str(t.sizes()), ", model has ", c10::str(p.value().sizes())));
      }
      pt.push_back(t);
    }
    for (const auto& b : buffers) {
      torch::Tensor t;
      if (!ar.try_read("model/buffer/" + b.key(), t, true)) return bad("missing buffer " + b.key());
      if (t.sizes() != b.value().sizes()) return bad("buffer " + b.key() + " has a different shape");
      bt.push_back(t);
    }
    torch::Tensor epoch, step, bie, rng;
    if (!ar.try_read("state/epoch", epoch) || !ar.try_read("state/step", step) ||
        !ar.try_read("state/batch_in_epoch", bie) || !ar.try_read("state/rng", rng)) {
      return bad("missing trainer state");
    }
    torch::serialize::InputArchive opt;
    if (!ar.try_read("optimizer", opt)) return bad("missing optimizer state");
    // Optimizer: load, and restore the previous state if that fails.
    torch::serialize::OutputArchive backup;
    optimizer_->save(backup);
    std::ostringstream bos;
    backup.save_to(bos);
    try {
      optimizer_->load(opt);
    } catch (const std::exception& e) {
      const std::string b = bos.str();
      torch::serialize::InputArchive restore;
      restore.load_from(b.data(), b.size(), device_);
      optimizer_->load(restore);
      return bad(absl::StrCat("optimizer state: ", e.what()));
    }
    torch::NoGradGuard ng;
    size_t i = 0;
    for (auto& p : params) p.value().copy_(pt[i++]);
    i = 0;
    for (auto& b : buffers) b.value().copy_(bt[i++]);
    state_.epoch = epoch.to(torch::kCPU).item<int64_t>();
    state_.step = step.to(torch::kCPU).item<int64_t>();
    state_.batch_in_epoch = bie.to(torch::kCPU).item<int64_t>();
    // Saved by a world of another size (an elastic job grew or shrank):
    // the same share of the epoch's samples is done, each rank now takes
    // a 1/world share of every global batch.
    torch::Tensor saved_world;
    if (ar.try_read("state/world_size", saved_world)) {
      const int64_t w = saved_world.to(torch::kCPU).item<int64_t>();
      if (w > 0 && w != world_size()) {
        state_.batch_in_epoch = state_.batch_in_epoch * w / world_size();
      }
    }
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> l(gen.mutex());
    gen.set_state(rng.to(torch::kCPU));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " cannot be loaded: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace frameworm
