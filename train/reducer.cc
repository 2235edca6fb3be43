#include "train/reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "train/torch_error.h"

namespace frameworm {

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(
    std::vector<std::pair<std::string, torch::Tensor>> params,
    c10::intrusive_ptr<c10d::Backend> process_group,
    const ReducerOptions& options) {
  if (!process_group) {
    return absl::InvalidArgumentError("reducer: null process group");
  }
  if (options.intra_node &&
      (options.intra_node->world_size() != process_group->getSize() ||
       options.intra_node->rank() != process_group->getRank())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reducer: intra-node allreduce is rank ", options.intra_node->rank(), "/",
        options.intra_node->world_size(), " but the process group is rank ",
        process_group->getRank(), "/", process_group->getSize()));
  }
  std::vector<std::pair<std::string, torch::Tensor>> trainable;
  for (auto& p : params) {
    if (p.second.requires_grad()) trainable.push_back(std::move(p));
  }
  if (trainable.empty()) {
    return absl::InvalidArgumentError(
        "reducer: the model has no parameter that requires grad");
  }
  return std::unique_ptr<Reducer>(
      new Reducer(std::move(trainable), std::move(process_group), options));
}

Reducer::Reducer(std::vector<std::pair<std::string, torch::Tensor>> params,
                 c10::intrusive_ptr<c10d::Backend> pg, const ReducerOptions& o)
    : params_(std::move(params)), pg_(std::move(pg)), options_(o) {
  BuildBuckets();
  ready_.assign(params_.size(), false);
  used_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    // Holding the accumulator keeps the same node (and our hook) for every
    // future graph: the variable itself only keeps a weak pointer.
    auto acc = torch::autograd::impl::grad_accumulator(params_[i].second);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list& /*inputs*/) {
          OnGradReady(i);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

Reducer::~Reducer() {
  std::lock_guard<std::mutex> l(mu_);
  armed_ = false;
  // The hooks capture `this`: remove them (the accumulators may outlive us
  // through the parameters).
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
}

void Reducer::BuildBuckets() {
  const int64_t n = static_cast<int64_t>(params_.size());
  param_bucket_.assign(params_.size(), 0);
  param_slot_.assign(params_.size(), 0);
  std::vector<size_t> current;
  int64_t bytes = 0;
  c10::ScalarType dtype = params_.back().second.scalar_type();
  c10::Device device = params_.back().second.device();
  auto flush = [&] {
    if (current.empty()) return;
    bucket_params_.push_back(current);
    current.clear();
    bytes = 0;
  };
  for (int64_t i = n - 1; i >= 0; --i) {
    const torch::Tensor& p = params_[i].second;
    const int64_t sz = p.numel() * p.element_size();
    if (!current.empty() &&
        (p.scalar_type() != dtype || p.device() != device ||
         bytes + sz > options_.bucket_cap_bytes)) {
      flush();
    }
    dtype = p.scalar_type();
    device = p.device();
    current.push_back(static_cast<size_t>(i));
    bytes += sz;
  }
  flush();
  for (size_t b = 0; b < bucket_params_.size(); ++b) {
    Bucket bucket;
    bucket.params = bucket_params_[b];
    int64_t off = 0;
    for (size_t s = 0; s < bucket.params.size(); ++s) {
      const size_t pi = bucket.params[s];
      param_bucket_[pi] = b;
      param_slot_[pi] = s;
      bucket.offsets.push_back(off);
      off += params_[pi].second.numel();
    }
    const torch::Tensor& first = params_[bucket.params[0]].second;
    bucket.shm = options_.intra_node != nullptr && first.device().is_cpu() &&
                 first.scalar_type() == torch::kFloat32;
    if (bucket.shm) ++intra_node_buckets_;
    bucket.flat = torch::Tensor();
    bucket.numel = off;
    buckets_.push_back(std::move(bucket));
  }
  // Intra-node buckets live in this rank's shared region when they all fit
  // (each starting on a cache line), so the allreduce reads them in place.
  int64_t shared_needed = 0;
  for (const Bucket& b : buckets_) {
    if (b.shm) shared_needed += (b.numel + 15) / 16 * 16;
  }
  const bool in_region = intra_node_buckets_ > 0 && options_.intra_node->shared_buffer() != nullptr &&
                         shared_needed <= options_.intra_node->shared_floats();
  int64_t region_off = 0;
  for (Bucket& b : buckets_) {
    const torch::Tensor& first = params_[b.params[0]].second;
    const auto opts = first.options().requires_grad(false);
    if (b.shm && in_region) {
      // The deleter keeps the mapping alive while any gradient views it.
      std::shared_ptr<ShmAllreduce> keep = options_.intra_node;
      b.flat = torch::from_blob(keep->shared_buffer() + region_off, {b.numel},
                                [keep](void*) {}, opts);
      b.flat.zero_();
      b.shared_offset = region_off;
      region_off += (b.numel + 15) / 16 * 16;
      if (pg_->getSize() > 1) {
        std::tie(b.share_lo, b.share_hi) = options_.intra_node->SharedShare(b.numel);
      }
      ++shared_buckets_;
    } else {
      b.flat = torch::zeros({b.numel}, opts);
    }
  }
  views_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Bucket& b = buckets_[param_bucket_[i]];
    const torch::Tensor& p = params_[i].second;
    // detach(): an alias of the bucket memory that autograd does not treat
    // as a view, so an optimizer's zero_grad() (which detach_()es .grad)
    // works on it.
    views_[i] = b.flat.narrow(0, b.offsets[param_slot_[i]], p.numel())
                    .view(p.sizes())
                    .detach();
  }
}

void Reducer::PrepareForBackward(bool sync) {
  std::lock_guard<std::mutex> l(mu_);
  armed_ = sync;
  in_backward_ = sync;
  next_launch_ = 0;
  launch_order_.clear();
  launched_in_backward_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(used_.begin(), used_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    b.own.clear();
    b.held.clear();
  }
}

void Reducer::OnGradReady(size_t index) {
  std::lock_guard<std::mutex> l(mu_);
  if (!armed_ || ready_[index]) return;
  used_[index] = true;
  MarkReadyLocked(index);
  LaunchReadyLocked();
}

void Reducer::MarkReadyLocked(size_t index) {
  Bucket& b = buckets_[param_bucket_[index]];
  torch::Tensor& p = params_[index].second;
  torch::NoGradGuard ng;
  torch::Tensor& slot = views_[index];
  const torch::Tensor g = p.grad();
  if (!g.defined()) {
    slot.zero_();  // unused on this rank: it contributes zeros
  } else if (!g.is_same(slot)) {
    // Autograd's fresh gradient (or one accumulated locally, or set by the
    // caller): one copy into the bucket, and .grad becomes the bucket's
    // slice from here on. In a shared bucket, the part in this rank's own
    // share is not copied: only this rank reads it, from where it lies.
    const int64_t off = b.offsets[param_slot_[index]];
    const int64_t end = off + slot.numel();
    const int64_t lo = std::max(off, b.share_lo), hi = std::min(end, b.share_hi);
    if (hi > lo && g.is_contiguous() && g.scalar_type() == torch::kFloat32 &&
        g.device().is_cpu() && g.numel() == slot.numel()) {
      // Plain copies of contiguous floats (no tensor ops: this runs for
      // every parameter of every step).
      const float* from = g.data_ptr<float>();
      float* to = slot.data_ptr<float>();
      if (lo > off) std::memcpy(to, from, static_cast<size_t>(lo - off) * sizeof(float));
      if (end > hi) {
        std::memcpy(to + (hi - off), from + (hi - off), static_cast<size_t>(end - hi) * sizeof(float));
      }
      b.own.push_back({lo, hi - lo, from + (lo - off)});
      b.held.push_back(g);
    } else {
      slot.copy_(g);
    }
    p.mutable_grad() = slot;
  }
  ready_[index] = true;
  --b.pending;
}

void Reducer::LaunchReadyLocked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_];
    if (b.shm) {  // summed in Finalize, in bucket order
      ++next_launch_;
      continue;
    }
    // A world of one has nothing to exchange: the sum is the gradient.
    if (pg_->getSize() > 1) {
      b.io = {b.flat};
      if (options_.recorder) {
        b.seq = options_.recorder->Enqueue("allreduce", "gradients", static_cast<int>(next_launch_),
                                           b.flat.numel() * b.flat.element_size());
      }
      b.work = pg_->allreduce(b.io);
    }
    launch_order_.push_back(static_cast<int>(next_launch_));
    if (in_backward_) ++launched_in_backward_;
    ++next_launch_;
  }
}

absl::Status Reducer::Finalize() {
  std::lock_guard<std::mutex> l(mu_);
  if (!armed_) return absl::OkStatus();
  in_backward_ = false;
  armed_ = false;
  std::vector<std::string> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) missing.push_back(params_[i].first);
  }
  if (!missing.empty() && !options_.find_unused_parameters) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter(s) [", absl::StrJoin(missing, ", "),
        "] received no gradient in this backward pass; their gradients "
        "cannot be averaged across ranks. Pass find_unused_parameters=true "
        "if parts of the model are legitimately unused, or make every "
        "parameter take part in the loss"));
  }
  try {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) MarkReadyLocked(i);
    }
    LaunchReadyLocked();
    c10::intrusive_ptr<c10d::Work> used_work;
    int64_t used_seq = 0;
    torch::Tensor used_count;
    std::vector<torch::Tensor> used_io;
    if (options_.find_unused_parameters) {
      // Which parameters were used on any rank (as DDP's local_used_map):
      // launched after every bucket, so the order matches on all ranks.
      std::vector<int32_t> u(params_.size());
      for (size_t i = 0; i < params_.size(); ++i) u[i] = used_[i] ? 1 : 0;
      used_count = torch::tensor(u, torch::kInt32)
                       .to(params_[0].second.device());
      used_io = {used_count};
      if (pg_->getSize() > 1) {
        if (options_.recorder) {
          used_seq = options_.recorder->Enqueue("allreduce", "used parameters", -1,
                                                used_count.numel() * used_count.element_size());
        }
        used_work = pg_->allreduce(used_io);
      }
    }
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
      Bucket& b = buckets_[bi];
      if (!b.shm) continue;
      const int64_t seq = options_.recorder ? options_.recorder->Enqueue(
          "allreduce(shm)", "gradients", static_cast<int>(bi), b.flat.numel() * 4) : 0;
      if (options_.recorder) options_.recorder->Started(seq);
      // The mean in the same pass as the sum: no div_ over the bucket below.
      const float world = static_cast<float>(pg_->getSize());
      std::sort(b.own.begin(), b.own.end(),
                [](const ShmAllreduce::OwnAddend& x, const ShmAllreduce::OwnAddend& y) {
                  return x.begin < y.begin;
                });
      absl::Status s =
          b.shared_offset >= 0
              ? options_.intra_node->AllreduceShared(b.shared_offset, b.numel, world, b.own)
              : options_.intra_node->Allreduce(b.flat.data_ptr<float>(), b.numel, world);
      b.own.clear();
      b.held.clear();
      if (options_.recorder) {
        if (s.ok()) {
          options_.recorder->Completed(seq);
        } else {
          options_.recorder->Failed(seq);
        }
      }
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("gradient allreduce of bucket ", bi,
                                                   " failed: ", s.message()));
      }
      launch_order_.push_back(static_cast<int>(bi));
    }
    const double world = static_cast<double>(pg_->getSize());
    for (auto& b : buckets_) {
      if (b.work) {
        Wait(b.work, b.seq);
        b.work.reset();
      }
      if (world > 1 && !b.shm) b.flat.div_(world);
    }
    torch::Tensor used_cpu;
    if (used_work) Wait(used_work, used_seq);
    if (used_count.defined()) used_cpu = used_count.to(torch::kCPU);
    torch::NoGradGuard ng;
    const int32_t* used_any =
        used_cpu.defined() ? used_cpu.data_ptr<int32_t>() : nullptr;
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i].second;
      if (used_any != nullptr && used_any[i] == 0) {
        p.mutable_grad() = torch::Tensor();  // unused on every rank: no grad
        continue;
      }
      torch::Tensor g = p.grad();
      if (!g.defined()) {
        p.mutable_grad() = views_[i];
      } else if (!g.is_same(views_[i])) {
        g.copy_(views_[i]);
      }
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("gradient allreduce failed: ", TorchMessage(e)));
  }
  return absl::OkStatus();
}

void Reducer::Wait(const c10::intrusive_ptr<c10d::Work>& work, int64_t seq) {
  if (options_.recorder) {
    options_.recorder->Around(seq, [&] { work->wait(); });
  } else {
    work->wait();
  }
}

std::vector<int> Reducer::last_launch_order() const {
  std::lock_guard<std::mutex> l(mu_);
  return launch_order_;
}

int Reducer::last_launched_during_backward() const {
  std::lock_guard<std::mutex> l(mu_);
  return launched_in_backward_;
}

}  // namespace frameworm
