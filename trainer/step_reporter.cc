#include "trainer/step_reporter.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace frameworm {

StepReporter::StepReporter(ControlChannel* channel, size_t max_batch, size_t max_queued)
    : channel_(channel),
      max_batch_(std::max<size_t>(1, max_batch)),
      max_queued_(std::max<size_t>(1, max_queued)) {
  if (channel_ != nullptr) thread_ = std::thread([this] { Run(); });
}

absl::StatusOr<StepDirective> StepReporter::Submit(StepReport r) {
  std::lock_guard<std::mutex> l(mu_);
  if (!terminal_.ok()) return terminal_;
  if (channel_ == nullptr || closing_) return latest_;
  queue_.push_back(std::move(r));
  while (queue_.size() > max_queued_) {
    queue_.pop_front();
    ++dropped_;
  }
  // A call in flight picks the queue up when it returns: no wake-up (and
  // no context switch) per step while the coordinator answers.
  if (!in_flight_) cv_.notify_one();
  return latest_;
}

void StepReporter::Run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return closing_ || !queue_.empty(); });
    if (queue_.empty() || !terminal_.ok()) {
      if (closing_) break;
      queue_.clear();
      continue;
    }
    std::vector<StepReport> batch;
    const size_t n = std::min(max_batch_, queue_.size());
    batch.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    in_flight_ = true;
    ++calls_;
    l.unlock();
    absl::StatusOr<StepDirective> d = channel_->ReportSteps(batch);
    l.lock();
    in_flight_ = false;
    if (d.ok()) {
      latest_ = *d;
      sent_ += static_cast<int64_t>(batch.size());
    } else {
      dropped_ += static_cast<int64_t>(batch.size());
      const absl::StatusCode code = d.status().code();
      if (code == absl::StatusCode::kAborted || code == absl::StatusCode::kPermissionDenied) {
        terminal_ = d.status();
        dropped_ += static_cast<int64_t>(queue_.size());
        queue_.clear();
      } else if (!closing_) {
        // The coordinator away or refusing: do not spin on it.
        cv_.wait_for(l, std::chrono::milliseconds(200), [this] { return closing_; });
      }
    }
    if (queue_.empty()) idle_.notify_all();
  }
  idle_.notify_all();
}

absl::Status StepReporter::Close(std::chrono::milliseconds flush) {
  std::unique_lock<std::mutex> l(mu_);
  if (thread_.joinable()) {
    idle_.wait_for(l, flush, [this] { return (queue_.empty() && !in_flight_) || !terminal_.ok(); });
    closing_ = true;
    dropped_ += static_cast<int64_t>(queue_.size());
    queue_.clear();
    cv_.notify_all();
    l.unlock();
    thread_.join();
    l.lock();
  }
  closing_ = true;
  return terminal_;
}

int64_t StepReporter::calls() const {
  std::lock_guard<std::mutex> l(mu_);
  return calls_;
}

int64_t StepReporter::sent() const {
  std::lock_guard<std::mutex> l(mu_);
  return sent_;
}

int64_t StepReporter::dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

}  // namespace frameworm
