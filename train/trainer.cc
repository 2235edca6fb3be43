#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>
#include <torch/nn/parallel/data_parallel.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status FromTorch(const std::exception& e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

std::mutex g_pg_mu;
c10::intrusive_ptr<c10d::Backend> g_pg;  // guarded by g_pg_mu

// Creations of an intra-node allreduce in this process: part of the store
// key, so successive trainers in one job rendezvous on fresh keys (every
// rank creates its trainers in the same order).
std::atomic<int> g_shm_seq{0};

// The intra-node allreduce for `pg` when every rank is on this machine;
// null when not applicable. Errors: setup failures (the caller falls back).
absl::StatusOr<std::shared_ptr<ShmAllreduce>> MaybeIntraNode(
    const c10::intrusive_ptr<c10d::Backend>& pg, torch::nn::Module& module,
    const DistributedOptions& o) {
  auto env = ReadDistributedEnv();
  if (!env.ok() || env->local_world_size != pg->getSize() ||
      env->world_size != pg->getSize() || env->rank != pg->getRank()) {
    return std::shared_ptr<ShmAllreduce>();
  }
  int64_t float_bytes = 0;
  for (const auto& p : module.parameters(true)) {
    if (p.requires_grad() && p.scalar_type() == torch::kFloat32) float_bytes += p.numel() * 4;
  }
  if (float_bytes == 0) return std::shared_ptr<ShmAllreduce>();
  const int seq = g_shm_seq.fetch_add(1);
  absl::StatusOr<std::unique_ptr<ShmAllreduce>> shm;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env->master_port);
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = o.timeout;
    c10d::TCPStore store(env->master_addr, so);
    ShmAllreduceOptions sa;
    sa.name = absl::StrCat("frameworm-shm/", seq);
    sa.rank = pg->getRank();
    sa.world_size = pg->getSize();
    sa.capacity_bytes = std::max<int64_t>(64, std::min<int64_t>(float_bytes, sa.capacity_bytes));
    sa.timeout = o.timeout;
    shm = ShmAllreduce::Create(sa, store);
  } catch (const c10::Error& e) {
    shm = absl::UnavailableError(
        absl::StrCat("store for the shm rendezvous: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    shm = absl::UnavailableError(absl::StrCat("store for the shm rendezvous: ", e.what()));
  }
  // All ranks take the same path: the shm one only if it worked everywhere.
  std::vector<torch::Tensor> io{torch::tensor({shm.ok() ? 0 : 1}, torch::kInt32)};
  pg->allreduce(io)->wait();
  if (!shm.ok()) return shm.status();
  if (io[0].item<int32_t>() != 0) {
    return absl::UnavailableError("shm allreduce setup failed on another rank");
  }
  return std::shared_ptr<ShmAllreduce>(std::move(*shm));
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
      absl::Status s = FinishBackward(last);
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
    if (absl::Status s = CheckpointAt(info.step); !s.ok()) return s;
  }
  return a.stop;
}

absl::Status Trainer::CheckpointAt(int64_t step) {
  if (options_.on_progress) options_.on_progress();
  const std::string path = CheckpointPath(step);
  auto ci = save_checkpoint(path);
  if (!ci.ok()) return ci.status();
  if (rank() == 0) {
    if (options_.verbose) {
      std::cout << "{\"event\":\"checkpoint\",\"step\":" << step
                << ",\"path\":\"" << path << "\",\"bytes\":" << ci->bytes
                << ",\"checksum\":\"" << ci->checksum << "\"}" << std::endl;
    }
    if (options_.on_checkpoint) options_.on_checkpoint(step, path, *ci);
  }
  return absl::OkStatus();
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
      for (int64_t i = 0; i < k; ++i) mbs.push_back(train_loader.batch(state_.batch_in_epoch + i));
      auto info = train_step(mbs);
      if (!info.ok()) return info.status();
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
  if (options_.checkpoint_every > 0 && state_.step > 0 &&
      state_.step % options_.checkpoint_every != 0) {
    return CheckpointAt(state_.step);
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------ checkpoints

absl::StatusOr<CheckpointFileInfo> Trainer::save_checkpoint(const std::string& path) {
  absl::Status write_status = absl::OkStatus();
  CheckpointFileInfo info;
  if (rank() == 0) {
    std::string payload;
    try {
      torch::serialize::OutputArchive ar;
      auto module = model_.ptr();
      for (const auto& p : module->named_parameters(true)) {
        ar.write("model/param/" + p.key(), p.value().detach());
      }
      for (const auto& b : module->named_buffers(true)) {
        ar.write("model/buffer/" + b.key(), b.value(), /*is_buffer=*/true);
      }
      torch::serialize::OutputArchive opt;
      optimizer_->save(opt);
      ar.write("optimizer", opt);
      ar.write("state/epoch", torch::tensor({state_.epoch}, torch::kLong));
      ar.write("state/step", torch::tensor({state_.step}, torch::kLong));
      ar.write("state/batch_in_epoch", torch::tensor({state_.batch_in_epoch}, torch::kLong));
      ar.write("state/sampler_epoch", torch::tensor({state_.epoch}, torch::kLong));
      ar.write("state/world_size", torch::tensor({(int64_t)world_size()}, torch::kLong));
      {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> l(gen.mutex());
        ar.write("state/rng", gen.get_state());
      }
      std::ostringstream os;
      ar.save_to(os);
      payload = os.str();
    } catch (const std::exception& e) {
      write_status = FromTorch(e, absl::StrCat("serializing checkpoint ", path));
    }
    if (write_status.ok()) {
      auto w = WriteCheckpointFile(path, payload);
      if (w.ok()) {
        info = *w;
      } else {
        write_status = w.status();
      }
    }
  }
  // The barrier: every rank waits for rank 0's outcome.
  auto flag = BroadcastFromRank0({write_status.ok() ? 1 : 0});
  if (!flag.ok()) return flag.status();
  if (!write_status.ok()) return write_status;
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
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> l(gen.mutex());
    gen.set_state(rng.to(torch::kCPU));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " cannot be loaded: ", e.what()));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------ DistributedTrainer

absl::StatusOr<std::unique_ptr<DistributedTrainer>> DistributedTrainer::Create(
    Model model, std::shared_ptr<torch::optim::Optimizer> optimizer,
    DistributedOptions options) {
  if (!options.backend.empty() && options.backend != "gloo" && options.backend != "nccl") {
    ProcessGroupOptions po;
    po.backend = options.backend;
    return CreateProcessGroup(po).status();  // the named error
  }
  if (options.gradient_accumulation_steps < 1) {
    return absl::InvalidArgumentError("gradient_accumulation_steps must be >= 1");
  }
  if (options.bucket_cap_mb <= 0) return absl::InvalidArgumentError("bucket_cap_mb must be > 0");
  c10::intrusive_ptr<c10d::Backend> pg = options.process_group;
  if (!pg) pg = default_process_group();
  if (!pg) {
    absl::Status s = setup_distributed(options.backend);
    if (!s.ok()) return s;
    pg = default_process_group();
  }
  const std::string name = pg->getBackendName();
  if (!options.backend.empty() && name != options.backend) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backend \"", options.backend, "\" requested but the process group uses \"", name, "\""));
  }
  torch::Device device = torch::kCPU;
  if (name == "nccl") {
    int local = 0;
    auto env = ReadDistributedEnv();
    local = env.ok() ? env->local_rank : pg->getRank();
    const int n = static_cast<int>(torch::cuda::device_count());
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local % std::max(1, n)));
  }
  if (options.gradient_accumulation_steps > 1) {
    options.trainer.gradient_accumulation_steps = options.gradient_accumulation_steps;
  }
  std::unique_ptr<DistributedTrainer> t(new DistributedTrainer(
      std::move(model), std::move(optimizer), device, options, pg));
  if (options.scale_lr) t->ScaleBaseLr(pg->getSize());
  absl::Status s = t->BroadcastInitialState();
  if (!s.ok()) return s;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : t->model_.ptr()->named_parameters(true)) named.emplace_back(p.key(), p.value());
  ReducerOptions ro;
  ro.bucket_cap_bytes = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  ro.find_unused_parameters = options.find_unused_parameters;
  if (options.intra_node_shm && name == "gloo" && device.is_cpu() && pg->getSize() > 1) {
    auto shm = MaybeIntraNode(pg, *t->model_.ptr(), options);
    if (shm.ok()) {
      ro.intra_node = *shm;
    } else if (pg->getRank() == 0) {
      std::cerr << "frameworm: intra-node shared-memory allreduce unavailable ("
                << shm.status() << "); averaging gradients over gloo" << std::endl;
    }
  }
  auto r = Reducer::Create(std::move(named), pg, ro);
  if (!r.ok()) return r.status();
  t->reducer_ = std::move(*r);
  return t;
}

DistributedTrainer::DistributedTrainer(Model model,
                                       std::shared_ptr<torch::optim::Optimizer> optimizer,
                                       torch::Device device, DistributedOptions options,
                                       c10::intrusive_ptr<c10d::Backend> pg)
    : Trainer(std::move(model), std::move(optimizer), device, options.trainer),
      doptions_(std::move(options)),
      pg_(std::move(pg)) {}

absl::Status DistributedTrainer::BroadcastInitialState() {
  try {
    torch::NoGradGuard ng;
    auto module = model_.ptr();
    std::vector<torch::Tensor> all;
    for (auto& p : module->parameters(true)) all.push_back(p);
    for (auto& b : module->buffers(true)) all.push_back(b);
    for (auto& t : all) {
      std::vector<torch::Tensor> io{t.detach()};
      c10d::BroadcastOptions bo;
      bo.rootRank = 0;
      pg_->broadcast(io, bo)->wait();
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("broadcast of rank 0's parameters failed: ", e.what()));
  }
  return absl::OkStatus();
}

void DistributedTrainer::PrepareBackward(bool sync) { reducer_->PrepareForBackward(sync); }

absl::Status DistributedTrainer::FinishBackward(bool sync) {
  if (!sync) return absl::OkStatus();
  return reducer_->Finalize();
}

absl::StatusOr<std::vector<double>> DistributedTrainer::AllreduceSum(std::vector<double> v) {
  try {
    torch::Tensor t = torch::tensor(v, torch::kFloat64).to(device_);
    std::vector<torch::Tensor> io{t};
    pg_->allreduce(io)->wait();
    torch::Tensor c = t.to(torch::kCPU);
    for (size_t i = 0; i < v.size(); ++i) v[i] = c[i].item<double>();
    return v;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metric allreduce failed: ", e.what()));
  }
}

absl::StatusOr<std::vector<int64_t>> DistributedTrainer::BroadcastFromRank0(std::vector<int64_t> v) {
  try {
    torch::Tensor t = torch::tensor(v, torch::kLong).to(device_);
    std::vector<torch::Tensor> io{t};
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    pg_->broadcast(io, bo)->wait();
    torch::Tensor c = t.to(torch::kCPU);
    for (size_t i = 0; i < v.size(); ++i) v[i] = c[i].item<int64_t>();
    return v;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("broadcast from rank 0 failed: ", e.what()));
  }
}

void DistributedTrainer::PrepareLoaders(DataLoader& train, DataLoader& val) {
  train.set_distributed(rank(), world_size());
  val.set_distributed(rank(), world_size());
}

// ------------------------------------------------------ DataParallelTrainer

namespace {

class DataParallelModuleImpl : public torch::nn::Module {
 public:
  DataParallelModuleImpl(torch::nn::Sequential inner, std::vector<torch::Device> devices)
      : inner_(register_module("module", inner)), devices_(std::move(devices)) {}
  torch::Tensor forward(torch::Tensor x) {
    if (devices_.size() >= 2) {
      return torch::nn::parallel::data_parallel(inner_, x, devices_, devices_[0]);
    }
    return inner_->forward(x);
  }

 private:
  torch::nn::Sequential inner_;
  std::vector<torch::Device> devices_;
};
TORCH_MODULE(DataParallelModule);

}  // namespace

torch::nn::AnyModule DataParallelTrainer::wrap(torch::nn::Sequential model,
                                               std::vector<torch::Device> devices) {
  if (devices.empty() && torch::cuda::is_available()) {
    for (size_t i = 0; i < torch::cuda::device_count(); ++i) {
      devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    }
  }
  if (devices.size() < 2) {
    const std::string where = devices.empty() ? std::string("cpu") : devices[0].str();
    std::cout << "DataParallelTrainer: " << devices.size()
              << " CUDA device(s) available; training on " << where
              << " without data parallelism" << std::endl;
  } else {
    std::cout << "DataParallelTrainer: splitting each batch across " << devices.size()
              << " devices" << std::endl;
    model->to(devices[0]);
  }
  return torch::nn::AnyModule(DataParallelModule(model, devices));
}

// ------------------------------------------------------------ setup

absl::Status setup_distributed(const std::string& backend) {
  return setup_distributed(backend, ProcessEnvLookup());
}

absl::Status setup_distributed(const std::string& backend, const EnvLookup& lookup) {
  auto env = ParseRankEnv(lookup);
  if (!env.ok()) return env.status();
  ProcessGroupOptions po;
  po.backend = backend.empty() ? DefaultBackend() : backend;
  po.master_addr = env->master_addr;
  po.master_port = env->master_port;
  po.rank = env->rank;
  po.world_size = env->world_size;
  po.local_rank = env->local_rank;
  std::lock_guard<std::mutex> l(g_pg_mu);
  if (g_pg) return absl::FailedPreconditionError("setup_distributed: already set up");
  auto pg = CreateProcessGroup(po);
  if (!pg.ok()) return pg.status();
  g_pg = *pg;
  return absl::OkStatus();
}

void cleanup_distributed() {
  std::lock_guard<std::mutex> l(g_pg_mu);
  g_pg.reset();
}

c10::intrusive_ptr<c10d::Backend> default_process_group() {
  std::lock_guard<std::mutex> l(g_pg_mu);
  return g_pg;
}

}  // namespace frameworm
