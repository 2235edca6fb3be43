// DistributedTrainer (DDP over a c10d process group), DataParallelTrainer
// and the process-wide group of setup_distributed(): the contracts are in
// train/trainer.h.
#include "train/trainer.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>
#include <torch/nn/parallel/data_parallel.h>

#include <atomic>
#include <iostream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "train/torch_error.h"

namespace frameworm {
namespace {

std::mutex g_pg_mu;
c10::intrusive_ptr<c10d::Backend> g_pg;  // guarded by g_pg_mu

// Creations of an intra-node allreduce in this process: part of the store
// key, so successive trainers in one job rendezvous on fresh keys (every
// rank creates its trainers in the same order).
std::atomic<int> g_shm_seq{0};

// Gradients up to this size per rank live in the intra-node allreduce's
// shared region (larger ones are copied through its slots).
constexpr int64_t kMaxSharedGradientBytes = int64_t{256} << 20;

absl::StatusOr<std::shared_ptr<ShmAllreduce>> CreateIntraNode(
    const c10::intrusive_ptr<c10d::Backend>& pg, const std::string& master_addr, int master_port,
    int64_t float_bytes, int64_t shared_bytes, const DistributedOptions& o);

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
  int64_t float_bytes = 0, float_params = 0;
  for (const auto& p : module.parameters(true)) {
    if (p.requires_grad() && p.scalar_type() == torch::kFloat32) {
      float_bytes += p.numel() * 4;
      ++float_params;
    }
  }
  if (float_bytes == 0) return std::shared_ptr<ShmAllreduce>();
  // The gradients themselves go in the segment (summed in place) unless
  // they are large; a segment /dev/shm cannot hold falls back to slots only.
  int64_t shared_bytes = float_bytes + 64 * float_params;  // + each bucket's alignment
  if (shared_bytes > kMaxSharedGradientBytes) shared_bytes = 0;
  auto shm = CreateIntraNode(pg, env->master_addr, env->master_port, float_bytes, shared_bytes, o);
  if (!shm.ok() && shared_bytes > 0) {
    const absl::Status first = shm.status();
    shm = CreateIntraNode(pg, env->master_addr, env->master_port, float_bytes, 0, o);
    if (shm.ok() && pg->getRank() == 0) {
      std::cerr << "frameworm: the gradients do not fit in shared memory (" << first
                << "); the intra-node allreduce is copying them through its slots" << std::endl;
    }
  }
  return shm;
}

// One collective attempt at creating the intra-node allreduce (all ranks
// get the same verdict).
absl::StatusOr<std::shared_ptr<ShmAllreduce>> CreateIntraNode(
    const c10::intrusive_ptr<c10d::Backend>& pg, const std::string& master_addr, int master_port,
    int64_t float_bytes, int64_t shared_bytes, const DistributedOptions& o) {
  const int seq = g_shm_seq.fetch_add(1);
  absl::StatusOr<std::unique_ptr<ShmAllreduce>> shm;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(master_port);
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = o.timeout;
    c10d::TCPStore store(master_addr, so);
    ShmAllreduceOptions sa;
    sa.name = absl::StrCat("frameworm-shm/", seq);
    sa.rank = pg->getRank();
    sa.world_size = pg->getSize();
    sa.capacity_bytes = std::max<int64_t>(64, std::min<int64_t>(float_bytes, sa.capacity_bytes));
    sa.timeout = o.timeout;
    sa.shared_bytes = shared_bytes;
    shm = ShmAllreduce::Create(sa, store);
  } catch (const c10::Error& e) {
    shm = absl::UnavailableError(
        absl::StrCat("store for the shm rendezvous: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    shm = absl::UnavailableError(absl::StrCat("store for the shm rendezvous: ", TorchMessage(e)));
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

}  // namespace

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
    absl::Status s = setup_distributed(options.backend, options.timeout);
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
  t->recorder_ = std::make_shared<FlightRecorder>(options.flight_recorder_entries);
  if (options.scale_lr) t->ScaleBaseLr(pg->getSize());
  absl::Status s = t->BroadcastInitialState();
  if (!s.ok()) return s;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : t->model_.ptr()->named_parameters(true)) named.emplace_back(p.key(), p.value());
  ReducerOptions ro;
  ro.bucket_cap_bytes = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  ro.find_unused_parameters = options.find_unused_parameters;
  if (t->recorder_->capacity() > 0) ro.recorder = t->recorder_;
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
      Recorded("broadcast", "parameters", t.numel() * t.element_size(),
               [&] { return pg_->broadcast(io, bo); });
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("broadcast of rank 0's parameters failed: ", TorchMessage(e)));
  }
  return absl::OkStatus();
}

void DistributedTrainer::PrepareBackward(bool sync) { reducer_->PrepareForBackward(sync); }

absl::Status DistributedTrainer::FinishBackward(bool sync) {
  if (!sync) return absl::OkStatus();
  return reducer_->Finalize();
}

void DistributedTrainer::Recorded(const char* op, const char* what, int64_t bytes,
                                  const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  const int64_t seq = recorder_->Enqueue(op, what, -1, bytes);
  c10::intrusive_ptr<c10d::Work> work = issue();
  recorder_->Around(seq, [&] { work->wait(); });
}

absl::StatusOr<std::vector<double>> DistributedTrainer::AllreduceSum(std::vector<double> v,
                                                                    const char* what) {
  try {
    torch::Tensor t = torch::tensor(v, torch::kFloat64).to(device_);
    std::vector<torch::Tensor> io{t};
    CollectiveWait blocked(*this);
    Recorded("allreduce", what, t.numel() * 8, [&] { return pg_->allreduce(io); });
    torch::Tensor c = t.to(torch::kCPU);
    for (size_t i = 0; i < v.size(); ++i) v[i] = c[i].item<double>();
    return v;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metric allreduce failed: ", TorchMessage(e)));
  }
}

absl::StatusOr<std::vector<int64_t>> DistributedTrainer::BroadcastFromRank0(std::vector<int64_t> v,
                                                                           const char* what) {
  ShmAllreduce* shm = reducer_->intra_node();
  if (shm != nullptr && v.size() <= static_cast<size_t>(ShmAllreduce::kMaxBroadcastValues)) {
    // Every rank takes this path or none: the same sizes, and the reducer's
    // intra-node path is chosen collectively.
    CollectiveWait blocked(*this);
    const int64_t seq = recorder_->Enqueue("broadcast", what, -1, static_cast<int64_t>(v.size()) * 8);
    recorder_->Started(seq);
    absl::Status s = shm->Broadcast(v.data(), static_cast<int>(v.size()), 0);
    if (!s.ok()) {
      recorder_->Failed(seq);
      return absl::UnavailableError(absl::StrCat("broadcast from rank 0 failed: ", s.message()));
    }
    recorder_->Completed(seq);
    return v;
  }
  try {
    torch::Tensor t = torch::tensor(v, torch::kLong).to(device_);
    std::vector<torch::Tensor> io{t};
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    CollectiveWait blocked(*this);
    Recorded("broadcast", what, t.numel() * 8, [&] { return pg_->broadcast(io, bo); });
    torch::Tensor c = t.to(torch::kCPU);
    for (size_t i = 0; i < v.size(); ++i) v[i] = c[i].item<int64_t>();
    return v;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("broadcast from rank 0 failed: ", TorchMessage(e)));
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

absl::Status setup_distributed(const std::string& backend, std::chrono::milliseconds timeout) {
  return setup_distributed(backend, ProcessEnvLookup(), timeout);
}

absl::Status setup_distributed(const std::string& backend, const EnvLookup& lookup,
                               std::chrono::milliseconds timeout) {
  auto env = ParseRankEnv(lookup);
  if (!env.ok()) return env.status();
  ProcessGroupOptions po;
  po.backend = backend.empty() ? DefaultBackend() : backend;
  po.master_addr = env->master_addr;
  po.master_port = env->master_port;
  po.rank = env->rank;
  po.world_size = env->world_size;
  po.local_rank = env->local_rank;
  po.timeout = timeout;
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
