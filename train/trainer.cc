#include "train/trainer.h"

#include "common/private_dir.h"
#include "train/json_values.h"
#include "train/memory_cadence.h"
#include "train/step_action_gap.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "train/torch_error.h"

namespace frameworm {
namespace {

using Clock = std::chrono::steady_clock;

// avg becomes the moving average with v (weight 0.1; v itself at first).
void MovingAverage(double& avg, double v) { avg = avg == 0 ? v : 0.9 * avg + 0.1 * v; }

absl::Status FromTorch(const std::exception& e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", TorchMessage(e)));
}


// Nine significant digits: enough to compare loss curves against a peer at
// 1e-6 (a diverged value is null).
std::string Fmt(double v) { return JsonNumber(v, 9); }

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

// torch::autocast for one forward pass and loss (AutocastScope): enables
// autocast with `dtype` on `device`'s type, restores what was there.
class AutocastScope {
 public:
  AutocastScope(const std::optional<torch::ScalarType>& dtype, torch::Device device)
      : type_(device.type()), on_(dtype.has_value()) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(type_);
    was_dtype_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, *dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(type_, was_enabled_);
    at::autocast::set_autocast_dtype(type_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType type_;
  bool on_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

// The loss followed by each metric of one batch, read back with one sync.
std::vector<double> LossAndMetrics(const torch::Tensor& loss, const torch::Tensor& out,
                                   const torch::Tensor& y, const std::vector<NamedMetric>& metrics) {
  if (metrics.empty()) return {loss.item<double>()};
  std::vector<torch::Tensor> v{loss.detach().to(torch::kDouble).reshape({})};
  torch::NoGradGuard ng;
  for (const auto& [name, fn] : metrics) {
    torch::Tensor m = fn(out, y);
    TORCH_CHECK(m.numel() == 1, "metric '", name, "' must return one value, not shape ", m.sizes());
    v.push_back(m.detach().to(torch::kDouble).reshape({}));
  }
  torch::Tensor all = torch::stack(v).to(torch::kCPU);
  return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
}

}  // namespace

double Trainer::GroupLr(size_t group, int64_t step) const {
  if (group >= base_lr_.size()) return 0;
  return ScheduledLr(options_.lr_schedule, base_lr_[group], step, options_.warmup_steps,
                     schedule_total_ > 0 ? schedule_total_ : options_.lr_schedule.total_steps);
}

double Trainer::lr_at(int64_t step) const { return GroupLr(0, step); }

absl::Status Trainer::CheckOptions() const {
  if (!options_.loss) return absl::InvalidArgumentError("TrainerOptions::loss is not set");
  if (absl::Status s = CheckLrSchedule(options_.lr_schedule); !s.ok()) return s;
  if (!(options_.clip_grad_norm >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_grad_norm must be >= 0, not ", options_.clip_grad_norm));
  }
  if (options_.autocast && *options_.autocast != torch::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "autocast supports bfloat16 only (float16 needs loss scaling), not ",
        c10::toString(*options_.autocast)));
  }
  if (!(options_.step_action_sync_share >= 0 && options_.step_action_sync_share < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step_action_sync_share must be in [0, 1), not ", options_.step_action_sync_share));
  }
  if (!(options_.step_action_max_delay_seconds > 0 &&
        std::isfinite(options_.step_action_max_delay_seconds))) {
    return absl::InvalidArgumentError(absl::StrCat("step_action_max_delay_seconds must be > 0, not ",
                                                   options_.step_action_max_delay_seconds));
  }
  if (options_.eval_every < 0 || options_.early_stopping_patience < 0) {
    return absl::InvalidArgumentError("eval_every and early_stopping_patience must be >= 0");
  }
  // A monitor that names no validation metric is refused before training,
  // even where nothing watches it yet (it is a typo either way).
  if (!MonitoredMetric()) {
    std::string have = "loss";
    for (const auto& [m, fn] : options_.metrics) absl::StrAppend(&have, ", ", m);
    return absl::InvalidArgumentError(absl::StrCat("the monitored metric '", options_.monitor,
                                                   "' is not a validation metric; there are: ",
                                                   have, " (val_loss and val_<metric> mean the same)"));
  }
  return absl::OkStatus();
}

std::optional<std::string> Trainer::MonitoredMetric() const {
  if (options_.monitor.empty()) return "loss";
  auto known = [this](const std::string& name) {
    if (name == "loss") return true;
    for (const auto& [m, fn] : options_.metrics) {
      if (m == name) return true;
    }
    return false;
  };
  if (known(options_.monitor)) return options_.monitor;
  // The name the JSON events and the metrics show ("val_accuracy"), as
  // Keras and Lightning users write it.
  if (absl::StartsWith(options_.monitor, "val_") && known(options_.monitor.substr(4))) {
    return options_.monitor.substr(4);
  }
  return std::nullopt;
}

torch::Tensor Trainer::Forward(const Batch& b) {
  if (options_.forward) return options_.forward(model_, b);
  return model_.forward(b.data);
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
    auto& groups = optimizer_->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(GroupLr(g, state_.step));
    int64_t total = 0;
    for (const auto& b : mbs) total += b.size();
    double wait = 0;
    std::vector<double> sums(1 + options_.metrics.size(), 0.0);  // loss, metrics; x samples
    for (size_t i = 0; i < mbs.size(); ++i) {
      const bool last = i + 1 == mbs.size();
      PrepareBackward(last);
      Batch b = OnDevice(mbs[i]);
      torch::Tensor out, loss;
      {
        AutocastScope ac(options_.autocast, device_);
        out = Forward(b);
        loss = options_.loss(out, b.target);
      }
      TORCH_CHECK(loss.numel() == 1, "the loss must be one value, not shape ", loss.sizes());
      if (mbs.size() == 1) {
        loss.backward();  // the common case: no scaling kernel on the hot path
      } else {
        (loss * (static_cast<double>(mbs[i].size()) / total)).backward();
      }
      const auto w0 = Clock::now();
      absl::Status s;
      {
        CollectiveWait blocked(*this);
        s = FinishBackward(last);
      }
      wait += std::chrono::duration<double>(Clock::now() - w0).count();
      if (!s.ok()) return s;
      const std::vector<double> v = LossAndMetrics(loss, out, b.target, options_.metrics);
      for (size_t k = 0; k < v.size(); ++k) sums[k] += v[k] * mbs[i].size();
    }
    if (options_.clip_grad_norm > 0) {
      torch::nn::utils::clip_grad_norm_(model_.ptr()->parameters(), options_.clip_grad_norm);
    }
    wait_for_snapshot();  // a checkpoint still copying the parameters the step changes
    optimizer_->step();
    ++state_.step;
    StepInfo info;
    info.step = state_.step;
    info.epoch = state_.epoch;
    info.samples = total;
    info.loss = sums[0] / total;
    for (size_t k = 0; k < options_.metrics.size(); ++k) {
      info.metrics[options_.metrics[k].first] = sums[k + 1] / total;
    }
    info.lr = lr_at(state_.step - 1);
    info.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    info.wait_seconds = std::min(wait, info.seconds);
    return info;
  } catch (const std::exception& e) {
    return FromTorch(e, "training step failed");
  }
}

Batch Trainer::OnDevice(const Batch& b) const {
  Batch out{b.data.to(device_), b.target.to(device_), {}};
  for (const auto& [name, t] : b.inputs) out.inputs[name] = t.to(device_);
  return out;
}

absl::StatusOr<std::map<std::string, double>> Trainer::evaluate(DataLoader& loader) {
  const size_t nm = options_.metrics.size();
  std::vector<double> sums(nm + 2, 0.0);  // loss, metrics (x samples), samples
  try {
    if (!options_.loss) return absl::InvalidArgumentError("TrainerOptions::loss is not set");
    auto module = model_.ptr();
    module->eval();
    torch::NoGradGuard ng;
    const int64_t nb = loader.num_batches();
    for (int64_t i = 0; i < nb; ++i) {
      if (options_.on_progress) options_.on_progress();
      Batch b = OnDevice(loader.batch(i));
      torch::Tensor out, loss;
      {
        AutocastScope ac(options_.autocast, device_);
        out = Forward(b);
        loss = options_.loss(out, b.target);
      }
      const std::vector<double> v = LossAndMetrics(loss, out, b.target, options_.metrics);
      for (size_t k = 0; k < v.size(); ++k) sums[k] += v[k] * b.size();
      sums[nm + 1] += b.size();
    }
    module->train();
  } catch (const std::exception& e) {
    return FromTorch(e, "evaluation failed");
  }
  auto g = AllreduceSum(sums, "validation metrics");
  if (!g.ok()) return g.status();
  std::map<std::string, double> m;
  const double n = std::max(1.0, (*g)[nm + 1]);
  m["loss"] = (*g)[0] / n;
  for (size_t k = 0; k < nm; ++k) m[options_.metrics[k].first] = (*g)[k + 1] / n;
  m["samples"] = (*g)[nm + 1];
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
    auto agreed = SyncStepAction(info, a);
    if (!agreed.ok()) return agreed.status();
    a = *agreed;
  }
  if (options_.checkpoint_every > 0 && info.step % options_.checkpoint_every == 0) {
    a.checkpoint = true;
  }
  if ((a.checkpoint || a.stop) && options_.on_action) options_.on_action(info, a);
  if (a.checkpoint) {
    absl::Status s = CheckpointAt(info.step);
    if (!s.ok()) return s;
    // A disk checkpoint is newer than any in-memory one due: the next
    // memory one is the next multiple of a fixed cadence after it, or an
    // automatic interval after it. (Also when the disk one is then skipped
    // for a full disk: a memory one comes an interval later.)
    const int64_t every = options_.memory_checkpoint_every;
    if (every > 0) next_memory_step_ = (info.step / every + 1) * every;
    if (every < 0) next_memory_step_ = info.step + memory_interval_;
  } else {
    absl::Status s = MaybeMemoryCheckpoint(info);
    if (!s.ok()) return s;  // the save before it failed
  }
  // A background save that failed (not for a full disk) ends training here.
  absl::Status failed = CheckpointFailure();
  if (!failed.ok()) return failed;
  return a.stop;
}

absl::StatusOr<StepAction> Trainer::SyncStepAction(const StepInfo& info, const StepAction& mine) {
  const double share = options_.step_action_sync_share;
  if (!(share > 0)) {
    auto v = BroadcastFromRank0({mine.checkpoint ? 1 : 0, mine.stop ? 1 : 0}, "step action");
    if (!v.ok()) return v.status();
    return StepAction{(*v)[0] != 0, (*v)[1] != 0};
  }
  pending_action_.checkpoint = pending_action_.checkpoint || mine.checkpoint;
  pending_action_.stop = pending_action_.stop || mine.stop;
  if (info.step < next_action_sync_step_) return StepAction{};
  // Rank 0's gap; the others' values are replaced by rank 0's.
  const int64_t next =
      info.step + StepActionGap(action_sync_seconds_, mean_step_seconds_, share,
                                options_.step_action_max_delay_seconds);
  const auto t0 = Clock::now();
  auto v = BroadcastFromRank0(
      {pending_action_.checkpoint ? 1 : 0, pending_action_.stop ? 1 : 0, next}, "step action");
  if (!v.ok()) return v.status();
  MovingAverage(action_sync_seconds_, std::chrono::duration<double>(Clock::now() - t0).count());
  pending_action_ = StepAction{};
  next_action_sync_step_ = (*v)[2];
  return StepAction{(*v)[0] != 0, (*v)[1] != 0};
}

bool Trainer::IsMemoryPath(const std::string& path) const {
  return !options_.memory_checkpoint_dir.empty() &&
         path.rfind(options_.memory_checkpoint_dir + "/", 0) == 0;
}

absl::Status Trainer::MaybeMemoryCheckpoint(const StepInfo& info) {
  MovingAverage(mean_step_seconds_, info.seconds);
  const int64_t every = options_.memory_checkpoint_every;
  if (rank() != 0 || every == 0 || options_.memory_checkpoint_dir.empty() ||
      !options_.async_checkpoint) {
    return absl::OkStatus();
  }
  if (every > 0 && next_memory_step_ == 0) {
    next_memory_step_ = ((info.step - 1) / every + 1) * every;  // the first multiple from here
  }
  // Due from its step on: one whose step finds a save in flight is taken at
  // the first step after it that finds none (it never waits for the save),
  // unless a periodic disk checkpoint comes within half an interval: that
  // save would wait for this write, and replaces it anyway.
  if (info.step < next_memory_step_ || ckpt_busy_.load()) return absl::OkStatus();
  if (const int64_t disk = options_.checkpoint_every; info.step > next_memory_step_ && disk > 0) {
    const int64_t next_disk = (info.step / disk + 1) * disk;
    const int64_t interval = every > 0 ? every : memory_interval_;
    if (next_disk - info.step <= std::max<int64_t>(1, interval / 2)) {
      return absl::OkStatus();
    }
  }
  // The save before this one ended: its failure (a disk checkpoint's) ends
  // training, as it would at the next step.
  if (absl::Status previous = JoinCheckpointWrite(); !previous.ok()) return previous;
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
  if (every > 0) {
    next_memory_step_ = (info.step / every + 1) * every;
  } else {
    // The last in-memory save's copy and write beside training count too:
    // they compete for the cores and memory bandwidth (the previous save's
    // times, this one is running; before one ended, the copy's).
    double background = 0;
    {
      std::lock_guard<std::mutex> l(ckpt_mu_);
      background = memory_background_seconds_ >= 0 ? memory_background_seconds_ : copy_seconds_;
    }
    memory_interval_ = MemoryCheckpointInterval(take_seconds_, background, mean_step_seconds_);
    next_memory_step_ = info.step + memory_interval_;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Trainer::AfterEvaluation() {
  if (!options_.keep_best && options_.early_stopping_patience == 0) return false;
  const std::string name = MonitoredMetric().value_or(options_.monitor);
  auto it = state_.val_metrics.find(name);
  if (it == state_.val_metrics.end() || name == "samples") {
    std::string have = "loss";
    for (const auto& [m, fn] : options_.metrics) absl::StrAppend(&have, ", ", m);
    return absl::InvalidArgumentError(absl::StrCat("the monitored metric '", name,
                                                   "' is not a validation metric; there are: ",
                                                   have));
  }
  const bool higher =
      options_.monitor_higher_is_better.value_or(name.find("accuracy") != std::string::npos);
  const double v = it->second;
  const bool improved = std::isfinite(v) && (!best_ || (higher ? v > *best_ : v < *best_));
  if (improved) {
    best_ = v;
    evaluations_since_best_ = 0;
    if (options_.keep_best && rank() == 0) {
      const std::string path =
          absl::StrCat(options_.checkpoint_dir.empty() ? "." : options_.checkpoint_dir,
                       "/ckpt-best.pt");
      auto snap = CheckpointSnapshot::Take(*model_.ptr(), *optimizer_, Position(), /*freeze=*/false);
      absl::StatusOr<CheckpointFileInfo> w =
          snap.ok() ? (*snap)->WriteTo(path) : absl::StatusOr<CheckpointFileInfo>(snap.status());
      if (!w.ok()) {
        std::cerr << "frameworm: best checkpoint (" << name << " " << Fmt(v) << " at step "
                  << state_.step << ") not written: " << w.status().message() << "\n";
      } else if (options_.verbose) {
        std::cout << "{\"event\":\"best_checkpoint\",\"step\":" << state_.step
                  << ",\"metric\":\"" << name << "\",\"value\":" << Fmt(v) << ",\"path\":\""
                  << path << "\"}" << std::endl;
      }
    }
  } else {
    ++evaluations_since_best_;
  }
  bool stop = options_.early_stopping_patience > 0 &&
              evaluations_since_best_ >= options_.early_stopping_patience;
  if (world_size() > 1) {
    auto b = BroadcastFromRank0({stop ? 1 : 0}, "early stop");
    if (!b.ok()) return b.status();
    stop = (*b)[0] != 0;
  }
  if (stop && rank() == 0 && options_.verbose) {
    std::cout << "{\"event\":\"early_stop\",\"step\":" << state_.step << ",\"metric\":\""
              << name << "\",\"best\":" << Fmt(best_.value_or(v)) << ",\"evaluations_without_improvement\":"
              << evaluations_since_best_ << "}" << std::endl;
  }
  return stop;
}

absl::Status Trainer::CheckpointAt(int64_t step) {
  if (options_.on_progress) options_.on_progress();
  last_checkpoint_step_ = step;
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
  absl::Status previous = JoinCheckpointWrite();
  if (!previous.ok()) return previous;
  CleanCheckpointTempsOnce();
  std::unique_ptr<CheckpointSnapshot> spare;
  {
    std::lock_guard<std::mutex> l(ckpt_mu_);
    spare = std::move(ckpt_spare_);
  }
  const auto taken = std::chrono::steady_clock::now();
  auto snap = CheckpointSnapshot::Take(*model_.ptr(), *optimizer_, Position(), /*freeze=*/true,
                                       std::move(spare), options_.checkpoint_copy_during_step);
  take_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - taken).count();
  if (!snap.ok()) return snap.status();
  ckpt_busy_ = true;
  if (!IsMemoryPath(path)) disk_save_step_ = step;
  if ((*snap)->has_deferred_copies()) {
    std::lock_guard<std::mutex> l(ckpt_mu_);
    ckpt_copying_ = true;
  }
  // A thread that cannot be created (a process limit) costs this save,
  // not the flags: nothing stays marked in flight or being copied.
  try {
    ckpt_thread_ = std::thread([this, step, path, s = std::move(*snap)]() mutable {
      const auto began = std::chrono::steady_clock::now();
      absl::StatusOr<CheckpointFileInfo> written;
      if (s->has_deferred_copies()) {
        const auto c0 = std::chrono::steady_clock::now();
        absl::Status copied = s->CopyDeferred();
        {
          std::lock_guard<std::mutex> l(ckpt_mu_);
          ckpt_copying_ = false;
          copy_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
        }
        ckpt_cv_.notify_all();
        written = copied.ok() ? s->WriteTo(path) : absl::StatusOr<CheckpointFileInfo>(copied);
      } else {
        written = s->WriteTo(path);
      }
      {
        std::lock_guard<std::mutex> l(ckpt_mu_);
        ckpt_spare_ = std::move(s);  // the next snapshot copies into its memory
        if (IsMemoryPath(path)) {
          memory_background_seconds_ =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        }
      }
      absl::Status kept = Finished(/*rank0=*/true, step, path, written);
      {
        std::lock_guard<std::mutex> l(ckpt_mu_);
        if (!kept.ok() && ckpt_error_.ok()) ckpt_error_ = kept;
      }
      disk_save_step_ = 0;
      ckpt_busy_ = false;
    });
  } catch (const std::system_error& e) {
    {
      std::lock_guard<std::mutex> l(ckpt_mu_);
      ckpt_copying_ = false;
    }
    ckpt_cv_.notify_all();
    disk_save_step_ = 0;
    ckpt_busy_ = false;
    // Not RESOURCE_EXHAUSTED: that is a full disk, which skips a checkpoint.
    return absl::UnavailableError(
        absl::StrCat("no thread to write the checkpoint of step ", step, ": ", e.what()));
  }
  return absl::OkStatus();
}

void Trainer::wait_for_snapshot() {
  std::unique_lock<std::mutex> l(ckpt_mu_);
  if (!ckpt_copying_) return;
  const auto t0 = std::chrono::steady_clock::now();
  ckpt_cv_.wait(l, [&] { return !ckpt_copying_; });
  snapshot_wait_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Trainer::CleanCheckpointTempsOnce() {
  if (temps_cleaned_ || options_.checkpoint_dir.empty()) return;
  RemoveStaleCheckpointTemps(options_.checkpoint_dir);  // writers killed mid-write
  temps_cleaned_ = true;
}

absl::Status Trainer::JoinCheckpointWrite() {
  if (ckpt_thread_.joinable()) ckpt_thread_.join();
  return CheckpointFailure();
}

absl::Status Trainer::wait_for_checkpoint() {
  return Rank0Outcome(JoinCheckpointWrite(), "its last checkpoint");
}

absl::Status Trainer::Rank0Outcome(const absl::Status& mine, const std::string& what) {
  if (world_size() == 1) return mine;
  const int outcome = mine.ok() ? 1 : absl::IsResourceExhausted(mine) ? 2 : 0;
  auto flag = BroadcastFromRank0({outcome}, "checkpoint outcome");
  if (!flag.ok()) return flag.status();
  if (rank() == 0 || !mine.ok() || (*flag)[0] == 1) return mine;
  if ((*flag)[0] == 2) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rank 0's disk is full: ", what, " could not be written"));
  }
  return absl::AbortedError(absl::StrCat("rank 0 failed to write ", what));
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
  if (best_) p.best = *best_;
  p.since_best = evaluations_since_best_;
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
  if (absl::Status s = CheckOptions(); !s.ok()) return s;
  PrepareLoaders(train_loader, val_loader);
  next_action_sync_step_ = 0;  // the first step's action is broadcast
  pending_action_ = StepAction{};
  next_memory_step_ = 0;  // from this run's first step (a load may have moved it back)
  const int accum = std::max(1, options_.gradient_accumulation_steps);
  {
    // The steps a cosine or linear schedule spans, unless given.
    const int64_t per_epoch = (train_loader.num_batches() + accum - 1) / accum;
    schedule_total_ = options_.lr_schedule.total_steps > 0 ? options_.lr_schedule.total_steps
                      : options_.max_steps > 0
                          ? std::min(options_.max_steps, options_.epochs * per_epoch)
                          : options_.epochs * per_epoch;
  }
  bool stop = false;
  bool evaluated = false;
  const bool talk = rank() == 0 && options_.verbose;
  const size_t nm = options_.metrics.size();
  std::vector<std::string> metric_names;
  for (const auto& [name, fn] : options_.metrics) metric_names.push_back(name);
  auto metrics_json = [&](const std::string& prefix, const std::map<std::string, double>& m) {
    return JsonValues(prefix, m, metric_names, 9);
  };
  while (!stop && state_.epoch < options_.epochs) {
    if (options_.max_steps > 0 && state_.step >= options_.max_steps) break;
    const auto t0 = Clock::now();
    train_loader.set_epoch(state_.epoch);
    const int64_t nb = train_loader.num_batches();
    std::vector<double> sums(nm + 2, 0.0);  // loss, metrics (x samples), samples
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
      for (size_t m = 0; m < nm; ++m) {
        sums[m + 1] += info->metrics[options_.metrics[m].first] * info->samples;
      }
      sums[nm + 1] += info->samples;
      if (talk && options_.log_every > 0 && state_.step % options_.log_every == 0) {
        std::cout << "{\"event\":\"step\",\"epoch\":" << state_.epoch + 1
                  << ",\"step\":" << state_.step << ",\"loss\":" << Fmt(info->loss)
                  << metrics_json("", info->metrics) << ",\"lr\":" << Fmt(info->lr)
                  << ",\"step_seconds\":" << Fmt(info->seconds)
                  << ",\"wait_seconds\":" << Fmt(info->wait_seconds) << "}" << std::endl;
      }
      // A step's evaluation comes before its checkpoint (in AfterStep), so
      // the checkpoint holds the best metric and patience that evaluation
      // gave: a run resumed from it does not evaluate that step again, and
      // would otherwise take a worse model for the best.
      bool early_stop = false;
      if (options_.eval_every > 0 && state_.step % options_.eval_every == 0 &&
          state_.batch_in_epoch < nb) {
        auto v = evaluate(val_loader);
        if (!v.ok()) return v.status();
        state_.val_metrics = *v;
        evaluated = true;
        if (talk) {
          std::cout << "{\"event\":\"eval\",\"step\":" << state_.step
                    << ",\"val_loss\":" << Fmt(state_.val_metrics["loss"])
                    << metrics_json("val_", state_.val_metrics) << "}" << std::endl;
        }
        auto done = AfterEvaluation();
        if (!done.ok()) return done.status();
        early_stop = *done;
      }
      auto st = AfterStep(*info);
      if (!st.ok()) return st.status();
      if (*st || early_stop) {
        stop = true;
        break;
      }
    }
    auto g = AllreduceSum(sums, "train metrics");
    if (!g.ok()) return g.status();
    if ((*g)[nm + 1] > 0) {
      state_.train_metrics["loss"] = (*g)[0] / (*g)[nm + 1];
      for (size_t m = 0; m < nm; ++m) {
        state_.train_metrics[options_.metrics[m].first] = (*g)[m + 1] / (*g)[nm + 1];
      }
      state_.train_metrics["samples"] = (*g)[nm + 1];
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
                << metrics_json("train_", state_.train_metrics)
                << ",\"val_loss\":" << Fmt(state_.val_metrics["loss"])
                << metrics_json("val_", state_.val_metrics)
                << ",\"seconds\":"
                << Fmt(std::chrono::duration<double>(Clock::now() - t0).count())
                << "}" << std::endl;
    }
    auto done = AfterEvaluation();
    if (!done.ok()) return done.status();
    if (*done) stop = true;
  }
  if (!evaluated) {
    auto v = evaluate(val_loader);
    if (!v.ok()) return v.status();
    state_.val_metrics = *v;
    auto done = AfterEvaluation();
    if (!done.ok()) return done.status();
  }
  // With periodic checkpoints on, the finished model is always kept too.
  // Not when this step has its checkpoint already (taken on request at the
  // last step, or the run resumed from it with nothing left to do): the
  // same step written again could differ (another world size) from what
  // was recorded.
  // Rank 0 decides (the ranks may have loaded the step's checkpoint under
  // different paths: a private copy, a refetched one).
  const bool last_step_unaligned = options_.checkpoint_every > 0 && state_.step > 0 &&
                                   state_.step % options_.checkpoint_every != 0;
  bool final_checkpoint = last_step_unaligned && last_checkpoint_step_ != state_.step;
  if (last_step_unaligned && world_size() > 1) {
    auto agreed = BroadcastFromRank0({final_checkpoint ? 1 : 0}, "final checkpoint");
    if (!agreed.ok()) return agreed.status();
    final_checkpoint = (*agreed)[0] != 0;
  }
  // Every rank goes on to the outcome below whatever its save returned
  // (an asynchronous one fails on rank 0 alone).
  absl::Status last = final_checkpoint ? CheckpointAt(state_.step) : absl::OkStatus();
  // The last save is durable (and reported).
  if (absl::Status joined = JoinCheckpointWrite(); last.ok()) last = joined;
  // The finished model is not skipped for a full disk: that fails the rank
  // (its restart resumes from the previous checkpoint and tries again).
  if (last.ok() && last_step_unaligned) {
    std::lock_guard<std::mutex> l(ckpt_mu_);
    if (skipped_step_ == state_.step) {
      last = absl::ResourceExhaustedError(absl::StrCat("the final checkpoint of step ",
                                                       state_.step,
                                                       " could not be written: the disk is full"));
    }
  }
  // Every rank returns once rank 0's last checkpoint is durable: each may
  // load it at once.
  return Rank0Outcome(last, absl::StrCat("the checkpoint of step ", state_.step));
}

// ------------------------------------------------------------ checkpoints

absl::StatusOr<CheckpointFileInfo> Trainer::save_checkpoint(const std::string& path) {
  absl::Status write_status = JoinCheckpointWrite();
  CheckpointFileInfo info;
  if (rank() == 0) CleanCheckpointTempsOnce();
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
  // The barrier: every rank waits for rank 0's outcome.
  absl::Status agreed = Rank0Outcome(write_status, absl::StrCat("checkpoint ", path));
  if (!agreed.ok()) return agreed;
  return info;
}

absl::Status Trainer::load_checkpoint(const std::string& path) {
  wait_for_snapshot();  // a save in flight still reading the parameters
  auto payload = ReadCheckpointFile(path);
  if (!payload.ok()) return payload.status();
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(payload->data(), payload->size(), device_);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " cannot be parsed: ", TorchMessage(e)));
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
    // Every scalar and the RNG state are read and checked before anything
    // changes (on error nothing is).
    torch::Tensor saved_world, best, since_best;  // absent from older checkpoints
    const bool has_world = ar.try_read("state/world_size", saved_world);
    const bool has_best = ar.try_read("state/best", best) && ar.try_read("state/since_best", since_best);
    for (const auto& [name, t] : {std::pair<const char*, const torch::Tensor&>{"state/epoch", epoch},
                                  {"state/step", step},
                                  {"state/batch_in_epoch", bie},
                                  {"state/world_size", saved_world},
                                  {"state/since_best", since_best},
                                  {"state/best", best}}) {
      if (t.defined() && t.numel() != 1) {
        return absl::DataLossError(absl::StrCat("checkpoint ", path, "'s ", name, " holds ",
                                                t.numel(), " values, not one"));
      }
    }
    auto scalar = [](const torch::Tensor& t) { return t.to(torch::kCPU).item<int64_t>(); };
    const int64_t new_epoch = scalar(epoch), new_step = scalar(step);
    int64_t new_bie = scalar(bie);
    if (new_epoch < 0 || new_step < 0 || new_bie < 0) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path, " has a negative position: epoch ",
                                              new_epoch, ", step ", new_step,
                                              ", batch in epoch ", new_bie));
    }
    // Saved by a world of another size (an elastic job grew or shrank):
    // the same share of the epoch's samples is done, each rank now takes
    // a 1/world share of every global batch.
    if (has_world) {
      const int64_t w = scalar(saved_world);
      if (w > 0 && w != world_size()) new_bie = new_bie * w / world_size();
    }
    // The monitored metric's best so far.
    std::optional<double> new_best;
    if (has_best) {
      const double b = best.to(torch::kCPU).item<double>();
      if (!std::isnan(b)) new_best = b;
    }
    auto gen = at::detail::getDefaultCPUGenerator();
    rng = rng.to(torch::kCPU);
    {
      std::lock_guard<std::mutex> l(gen.mutex());
      const torch::Tensor now = gen.get_state();
      if (rng.scalar_type() != now.scalar_type() || rng.numel() != now.numel()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", path, "'s RNG state has ",
                                                rng.numel(), " values of ",
                                                c10::toString(rng.scalar_type()), "; this one has ",
                                                now.numel(), " of ", c10::toString(now.scalar_type())));
      }
    }
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
      return bad(absl::StrCat("optimizer state: ", TorchMessage(e)));
    }
    torch::NoGradGuard ng;
    size_t i = 0;
    for (auto& p : params) p.value().copy_(pt[i++]);
    i = 0;
    for (auto& b : buffers) b.value().copy_(bt[i++]);
    state_.epoch = new_epoch;
    state_.step = new_step;
    state_.batch_in_epoch = new_bie;
    if (has_best) {
      best_ = new_best;
      evaluations_since_best_ = scalar(since_best);
    }
    // This run's own checkpoint of that step: train() does not write it again.
    last_checkpoint_step_ = path == CheckpointPath(state_.step) ? state_.step : -1;
    std::lock_guard<std::mutex> l(gen.mutex());
    gen.set_state(rng);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " cannot be loaded: ", TorchMessage(e)));
  }
  return absl::OkStatus();
}

}  // namespace frameworm
