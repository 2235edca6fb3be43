#include "worker/fetch_stall_guard.h"

#include <algorithm>

namespace frameworm {

StallGuard::StallGuard(grpc::ClientContext* ctx, absl::Duration stall,
                       const std::atomic<bool>& stop, const std::atomic<bool>* abort)
    : ctx_(ctx), stall_(stall), stop_(stop), abort_(abort), last_(absl::Now()) {
  thread_ = std::thread([this] { Watch(); });
}

StallGuard::~StallGuard() {
  {
    absl::MutexLock l(&mu_);
    done_ = true;
  }
  thread_.join();
}

void StallGuard::Progress() {
  absl::MutexLock l(&mu_);
  last_ = absl::Now();
}

bool StallGuard::stalled() const {
  absl::MutexLock l(&mu_);
  return stalled_;
}

void StallGuard::Watch() {
  const absl::Duration every = std::min(absl::Milliseconds(100), stall_ / 4);
  absl::MutexLock l(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&done_), every)) {
    const bool asked = stop_.load() || (abort_ != nullptr && abort_->load());
    stalled_ = !asked && absl::Now() - last_ >= stall_;
    if (asked || stalled_) {
      ctx_->TryCancel();
      return;
    }
  }
}

}  // namespace frameworm
