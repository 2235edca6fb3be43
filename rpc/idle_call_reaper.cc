#include "rpc/idle_call_reaper.h"

#include <algorithm>

namespace frameworm {

IdleCallReaper::IdleCallReaper(absl::Duration idle) : idle_(idle) {
  if (idle_ > absl::ZeroDuration()) thread_ = std::thread([this] { Run(); });
}

IdleCallReaper::~IdleCallReaper() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void IdleCallReaper::Seen(grpc::CallbackServerContext* ctx) {
  if (idle_ <= absl::ZeroDuration()) return;
  absl::MutexLock l(&mu_);
  seen_[ctx] = absl::Now();
}

void IdleCallReaper::Gone(grpc::CallbackServerContext* ctx) {
  absl::MutexLock l(&mu_);
  seen_.erase(ctx);
}

void IdleCallReaper::Run() {
  const absl::Duration every = std::min(absl::Seconds(1), idle_ / 4);
  absl::MutexLock l(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), every)) {
    const absl::Time now = absl::Now();
    for (auto it = seen_.begin(); it != seen_.end();) {
      if (now - it->second < idle_) {
        ++it;
        continue;
      }
      // Under mu_: the call is alive until its reactor's Gone().
      it->first->TryCancel();
      it = seen_.erase(it);
    }
  }
}

}  // namespace frameworm
