#include "train/checkpoint_snapshot.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <sstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "train/torch_error.h"

namespace frameworm {
namespace {

// Reusable tensors of a written snapshot, taken in order by shape and type;
// the copies are queued and made by Run, in parallel.
class Pool {
 public:
  explicit Pool(std::vector<torch::Tensor> v) : free_(std::move(v)) {}
  // A tensor like `t` (same sizes and type, on `device`) that will hold t's
  // values once CopyAll has run. A host copy of a GPU tensor is in pinned
  // (page-locked) memory, so the copy is a DMA that does not stage through
  // a driver buffer.
  torch::Tensor CopyOf(const torch::Tensor& t, const torch::Device& device,
                       std::vector<std::pair<torch::Tensor, torch::Tensor>>& copies) {
    const torch::Tensor src = t.detach();
    const bool pinned = device.is_cpu() && src.is_cuda();
    torch::Tensor out;
    for (size_t i = next_; i < free_.size() && !out.defined(); ++i) {
      torch::Tensor& c = free_[i];
      if (c.defined() && c.sizes() == src.sizes() && c.scalar_type() == src.scalar_type() &&
          c.device() == device && c.is_contiguous() && (!pinned || c.is_pinned())) {
        out = std::move(c);
        next_ = i + 1;
      }
    }
    if (!out.defined()) {
      out = torch::empty(src.sizes(), src.options()
                                          .device(device)
                                          .pinned_memory(pinned)
                                          .memory_format(torch::MemoryFormat::Contiguous));
    }
    copies.emplace_back(out, src);
    return out;
  }

 private:
  std::vector<torch::Tensor> free_;
  size_t next_ = 0;
};

// Makes every (dst, src) copy, large ones split into slices, over up to 4
// threads (a snapshot is bound by memory bandwidth, which one core does
// not fill). Copies from a GPU are queued without waiting (into pinned
// memory, or within the GPU), then each GPU involved is synchronized once:
// on return every copy holds its values.
void CopyAll(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& copies,
             int max_threads = 4) {
  constexpr int64_t kSlice = 8 << 20;  // bytes
  std::vector<std::pair<torch::Tensor, torch::Tensor>> slices;
  std::set<c10::DeviceIndex> gpus;
  int64_t total = 0;
  for (const auto& [dst, src] : copies) {
    if (src.is_cuda()) gpus.insert(src.device().index());
    const int64_t bytes = src.numel() * src.element_size();
    total += bytes;
    if (bytes <= kSlice || !src.is_contiguous() || !src.device().is_cpu()) {
      slices.emplace_back(dst, src);
      continue;
    }
    const int64_t per = std::max<int64_t>(1, kSlice / src.element_size());
    torch::Tensor d = dst.view(-1), s = src.view(-1);
    for (int64_t off = 0; off < src.numel(); off += per) {
      const int64_t n = std::min(per, src.numel() - off);
      slices.emplace_back(d.narrow(0, off, n), s.narrow(0, off, n));
    }
  }
  const int threads = static_cast<int>(std::min<int64_t>(
      {static_cast<int64_t>(std::max(1, max_threads)),
       static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())),
       total / kSlice + 1}));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    torch::NoGradGuard ng;
    for (size_t i; (i = next.fetch_add(1)) < slices.size();) {
      try {
        slices[i].first.copy_(slices[i].second, /*non_blocking=*/slices[i].second.is_cuda());
      } catch (...) {
        std::lock_guard<std::mutex> l(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // a process limit: fewer threads do it
      break;
    }
  }
  work();
  for (auto& t : pool) t.join();
  for (c10::DeviceIndex d : gpus) torch::cuda::synchronize(d);
  if (error) std::rethrow_exception(error);
}

// Calls f(state tensor, setter) for every state tensor of the optimizer,
// always in the same order, and returns true; returns false (and calls
// nothing) when a state type is not one of SGD, Adam, AdamW, Adagrad,
// RMSprop.
template <typename F>
bool ForEachStateTensor(torch::optim::Optimizer& optimizer, F f) {
  using namespace torch::optim;  // NOLINT: the optimizer state types
  for (const auto& kv : optimizer.state()) {
    OptimizerParamState* st = kv.second.get();
    if (!dynamic_cast<SGDParamState*>(st) && !dynamic_cast<AdamParamState*>(st) &&
        !dynamic_cast<AdamWParamState*>(st) && !dynamic_cast<AdagradParamState*>(st) &&
        !dynamic_cast<RMSpropParamState*>(st)) {
      return false;
    }
  }
  auto each = [&](const torch::Tensor& t, auto set) {
    if (t.defined()) f(t, std::function<void(torch::Tensor)>(set));
  };
  for (const auto& kv : optimizer.state()) {
    OptimizerParamState* st = kv.second.get();
    if (auto* s = dynamic_cast<SGDParamState*>(st)) {
      each(s->momentum_buffer(), [s](torch::Tensor c) { s->momentum_buffer(c); });
    } else if (auto* a = dynamic_cast<AdamParamState*>(st)) {
      each(a->exp_avg(), [a](torch::Tensor c) { a->exp_avg(c); });
      each(a->exp_avg_sq(), [a](torch::Tensor c) { a->exp_avg_sq(c); });
      each(a->max_exp_avg_sq(), [a](torch::Tensor c) { a->max_exp_avg_sq(c); });
    } else if (auto* w = dynamic_cast<AdamWParamState*>(st)) {
      each(w->exp_avg(), [w](torch::Tensor c) { w->exp_avg(c); });
      each(w->exp_avg_sq(), [w](torch::Tensor c) { w->exp_avg_sq(c); });
      each(w->max_exp_avg_sq(), [w](torch::Tensor c) { w->max_exp_avg_sq(c); });
    } else if (auto* g = dynamic_cast<AdagradParamState*>(st)) {
      each(g->sum(), [g](torch::Tensor c) { g->sum(c); });
    } else if (auto* r = dynamic_cast<RMSpropParamState*>(st)) {
      each(r->square_avg(), [r](torch::Tensor c) { r->square_avg(c); });
      each(r->momentum_buffer(), [r](torch::Tensor c) { r->momentum_buffer(c); });
      each(r->grad_avg(), [r](torch::Tensor c) { r->grad_avg(c); });
    }
  }
  return true;
}

// Saves the optimizer into `archive` so that the archive does not share
// tensors with the optimizer's further steps; `held` gets the tensors the
// archive holds (the next snapshot's pool). Host state: saved as is, then
// the optimizer is given copies and goes on with them (a copy either way;
// no extra serialization). GPU state, or host state whose copies are
// `deferred` (non-null): host copies (pinned for GPU state) are put in the
// state for the save and the optimizer's own tensors put back after it, so
// the archive is all host memory apart from the live state and the GPU
// holds nothing extra. Returns false, having saved nothing, for an unknown
// optimizer state type.
// Failure: every copy is allocated before the optimizer's state is touched,
// and the optimizer gets its own tensors back if the save throws. The host
// copies the optimizer goes on with are only allocated here (`swap_in`,
// filled by CopyAll(copies)): the caller hands them over with SwapIn once
// they hold their values, so a snapshot that fails on the way leaves the
// optimizer as it was.
bool SaveOptimizerApart(torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& archive,
                        Pool& pool, std::vector<torch::Tensor>& held,
                        std::vector<std::pair<torch::Tensor, torch::Tensor>>& copies,
                        std::vector<std::pair<torch::Tensor, torch::Tensor>>* deferred,
                        std::vector<torch::Tensor>& swap_in) {
  bool on_gpu = false;
  if (!ForEachStateTensor(optimizer, [&](const torch::Tensor& t, const auto&) {
        on_gpu = on_gpu || t.is_cuda();
      })) {
    return false;
  }
  if (on_gpu || deferred != nullptr) {
    auto& into = on_gpu || deferred == nullptr ? copies : *deferred;
    std::vector<torch::Tensor> own;
    ForEachStateTensor(optimizer, [&](const torch::Tensor& t, const auto&) {
      own.push_back(t);
      held.push_back(pool.CopyOf(t, torch::kCPU, into));
    });
    size_t j = 0;
    ForEachStateTensor(optimizer, [&](const torch::Tensor&, const auto& set) { set(held[j++]); });
    size_t i = 0;
    auto put_back = [&] {
      ForEachStateTensor(optimizer, [&](const torch::Tensor&, const auto& set) { set(own[i++]); });
    };
    try {
      optimizer.save(archive);
    } catch (...) {
      put_back();
      throw;
    }
    put_back();
    return true;
  }
  optimizer.save(archive);
  ForEachStateTensor(optimizer, [&](const torch::Tensor& t, const auto&) {
    held.push_back(t);
    swap_in.push_back(pool.CopyOf(t, t.device(), copies));
  });
  return true;
}

// Gives the optimizer `swap_in` (SaveOptimizerApart's host copies, filled)
// in place of its state tensors, in the same order.
void SwapIn(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& swap_in) {
  if (swap_in.empty()) return;
  size_t i = 0;
  ForEachStateTensor(optimizer, [&](const torch::Tensor&, const auto& set) { set(swap_in[i++]); });
}

torch::Tensor Scalar(int64_t v) { return torch::tensor({v}, torch::kLong); }

// The keys Trainer::load_checkpoint reads.
void Fill(torch::serialize::OutputArchive& ar,
          const std::vector<std::pair<std::string, torch::Tensor>>& params,
          const std::vector<std::pair<std::string, torch::Tensor>>& buffers,
          torch::serialize::OutputArchive& optimizer, const CheckpointPosition& p,
          const torch::Tensor& rng) {
  for (const auto& [k, t] : params) ar.write("model/param/" + k, t);
  for (const auto& [k, t] : buffers) ar.write("model/buffer/" + k, t, /*is_buffer=*/true);
  ar.write("optimizer", optimizer);
  ar.write("state/epoch", Scalar(p.epoch));
  ar.write("state/step", Scalar(p.step));
  ar.write("state/batch_in_epoch", Scalar(p.batch_in_epoch));
  ar.write("state/sampler_epoch", Scalar(p.epoch));
  ar.write("state/world_size", Scalar(p.world_size));
  ar.write("state/rng", rng);
  ar.write("state/best", torch::tensor({p.best}, torch::kDouble));
  ar.write("state/since_best", Scalar(p.since_best));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointSnapshot>> CheckpointSnapshot::Take(
    torch::nn::Module& module, torch::optim::Optimizer& optimizer,
    const CheckpointPosition& position, bool freeze,
    std::unique_ptr<CheckpointSnapshot> recycle, bool defer_copies) {
  std::unique_ptr<CheckpointSnapshot> s(new CheckpointSnapshot());
  s->position_ = position;
  std::vector<torch::Tensor> model_spare, optimizer_spare;
  if (recycle) {
    for (auto& kv : recycle->params_) model_spare.push_back(std::move(kv.second));
    for (auto& kv : recycle->buffers_) model_spare.push_back(std::move(kv.second));
    optimizer_spare = std::move(recycle->handed_over_);
    recycle.reset();  // the archive's references go with it
  }
  Pool model_pool(std::move(model_spare)), optimizer_pool(std::move(optimizer_spare));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (dst, src): made here
  std::vector<std::pair<torch::Tensor, torch::Tensor>> deferred;  // by CopyDeferred
  const bool defer = freeze && defer_copies;
  try {
    for (const auto& p : module.named_parameters(true)) {
      torch::Tensor t = freeze ? model_pool.CopyOf(p.value(), torch::kCPU,
                                                   defer && p.value().device().is_cpu() ? deferred : copies)
                               : p.value().detach();
      s->params_.emplace_back(p.key(), std::move(t));
    }
    for (const auto& b : module.named_buffers(true)) {
      torch::Tensor t = freeze ? model_pool.CopyOf(b.value(), torch::kCPU, copies) : b.value();
      s->buffers_.emplace_back(b.key(), std::move(t));
    }
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> l(gen.mutex());
      s->rng_ = gen.get_state();  // a new tensor: a copy already
    }
    s->optimizer_ = std::make_unique<torch::serialize::OutputArchive>();
    // Not frozen: the archive may refer to the live state.
    bool handed_over = !freeze;
    std::vector<torch::Tensor> swap_in;
    if (freeze) {
      handed_over = SaveOptimizerApart(optimizer, *s->optimizer_, optimizer_pool, s->handed_over_,
                                       copies, defer ? &deferred : nullptr, swap_in);
    }
    if (!freeze || !handed_over) optimizer.save(*s->optimizer_);
    CopyAll(copies);
    SwapIn(optimizer, swap_in);  // the last step that changes the optimizer
    if (!handed_over) {
      CopyAll(deferred);  // serialized below, now
      deferred.clear();
      // Unknown optimizer state: serialize everything now.
      std::ostringstream os;
      torch::serialize::OutputArchive ar;
      Fill(ar, s->params_, s->buffers_, *s->optimizer_, position, s->rng_);
      ar.save_to(os);
      s->payload_ = os.str();
      if (s->payload_.empty()) s->payload_.assign(1, '\0');  // never empty
      s->params_.clear();
      s->buffers_.clear();
      s->optimizer_.reset();
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("taking a checkpoint snapshot at step ",
                                            position.step, ": ", TorchMessage(e)));
  }
  s->deferred_ = std::move(deferred);
  return s;
}

absl::Status CheckpointSnapshot::CopyDeferred() {
  try {
    CopyAll(deferred_, /*max_threads=*/2);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("copying the checkpoint of step ", position_.step,
                                            " into host memory: ", TorchMessage(e)));
  }
  deferred_.clear();
  return absl::OkStatus();
}

absl::StatusOr<CheckpointFileInfo> CheckpointSnapshot::WriteTo(const std::string& path) const {
  if (!deferred_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint of step ", position_.step, " is written before its copies were made"));
  }
  if (!payload_.empty()) return WriteCheckpointFile(path, payload_);
  auto w = CheckpointFileWriter::Open(path);
  if (!w.ok()) return w.status();
  absl::Status write_status;
  try {
    torch::serialize::OutputArchive ar;
    Fill(ar, params_, buffers_, *optimizer_, position_, rng_);
    // After a failed write the rest is discarded but acknowledged: a short
    // count makes LibTorch's zip writer throw from a destructor.
    ar.save_to([&](const void* data, size_t n) -> size_t {
      if (!write_status.ok()) return n;
      if (data != nullptr) {
        write_status = (*w)->Append(data, n);
      } else {  // "skip n bytes" (a record's metadata only): zeros, as a seek would leave
        static const char kZeros[4096] = {};
        for (size_t left = n; left > 0 && write_status.ok();) {
          const size_t k = std::min(left, sizeof(kZeros));
          write_status = (*w)->Append(kZeros, k);
          left -= k;
        }
      }
      return n;
    });
  } catch (const std::exception& e) {
    if (write_status.ok()) {
      return absl::InternalError(absl::StrCat("serializing checkpoint ", path, ": ", TorchMessage(e)));
    }
  }
  if (!write_status.ok()) return write_status;
  return (*w)->Commit();
}

}  // namespace frameworm
