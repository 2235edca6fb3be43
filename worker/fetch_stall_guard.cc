#include "worker/fetch_stall_guard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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

absl::Status StallGuard::Ended() const {
  {
    absl::MutexLock l(&mu_);
    if (stalled_) {
      return absl::DeadlineExceededError(
          absl::StrCat("no chunk for ", absl::FormatDuration(stall_), " (the source stalled)"));
    }
  }
  if (stop_.load()) return absl::CancelledError("the worker is shutting down");
  if (abort_ != nullptr && abort_->load()) {
    return absl::AbortedError("another stream of this fetch failed");
  }
  return absl::OkStatus();
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
