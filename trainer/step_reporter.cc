#include "trainer/step_reporter.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

namespace frameworm {

StepReporter::StepReporter(ControlChannel* channel, size_t max_batch, size_t max_queued,
                           std::chrono::milliseconds min_interval)
    : channel_(channel),
      max_batch_(std::max<size_t>(1, max_batch)),
      max_queued_(std::max<size_t>(1, max_queued)),
      min_interval_(std::max(std::chrono::milliseconds(0), min_interval)) {
  if (channel_ != nullptr) thread_ = std::thread([this] { Run(); });
}

absl::StatusOr<StepDirective> StepReporter::Submit(StepReport r) {
  std::lock_guard<std::mutex> l(mu_);
  if (!terminal_.ok()) return terminal_;
  if (channel_ == nullptr || closing_) return latest_;
  queue_.push_back(std::move(r));
  DropOverflowLocked();
  // The thread wakes for the first report after a quiet spell and for a
  // full batch; otherwise it picks the queue up when its pause (or the
  // call in flight) ends: no wake-up, and no context switch, per step.
  if (idle_waiting_ || queue_.size() == max_batch_) cv_.notify_one();
  return latest_;
}

void StepReporter::DropOverflowLocked() {
  while (queue_.size() > max_queued_) {
    queue_.pop_front();
    ++dropped_;
  }
}

void StepReporter::SendNow() {
  std::lock_guard<std::mutex> l(mu_);
  send_now_ = true;
  cv_.notify_one();
}

void StepReporter::Run() {
  std::unique_lock<std::mutex> l(mu_);
  auto last_call = std::chrono::steady_clock::now() - min_interval_;
  for (;;) {
    idle_waiting_ = true;
    cv_.wait(l, [this] { return closing_ || !queue_.empty(); });
    idle_waiting_ = false;
    // At most one call per min_interval_, unless a full batch waits or
    // Close flushes.
    cv_.wait_until(l, last_call + min_interval_, [this] {
      return closing_ || flushing_ || send_now_ || queue_.size() >= max_batch_;
    });
    send_now_ = false;
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
    last_call = std::chrono::steady_clock::now();
    l.unlock();
    absl::StatusOr<StepDirective> d = channel_->ReportSteps(batch);
    l.lock();
    in_flight_ = false;
    if (d.ok()) {
      latest_ = *d;
      sent_ += static_cast<int64_t>(batch.size());
    } else {
      const absl::StatusCode code = d.status().code();
      if (code == absl::StatusCode::kAborted || code == absl::StatusCode::kPermissionDenied) {
        terminal_ = d.status();
        dropped_ += static_cast<int64_t>(batch.size() + queue_.size());
        queue_.clear();
      } else {
        if (CoordinatorAway(code) && !closing_) {
          // The coordinator away (restarting, or the link down): the batch
          // goes back in front of what was queued since, to be sent again.
          requeued_ += static_cast<int64_t>(batch.size());
          queue_.insert(queue_.begin(), std::make_move_iterator(batch.begin()),
                        std::make_move_iterator(batch.end()));
          DropOverflowLocked();
        } else {
          // Refused: sending it again would not help.
          dropped_ += static_cast<int64_t>(batch.size());
        }
        // Do not spin on a coordinator that is away or refusing.
        if (!closing_) cv_.wait_for(l, std::chrono::milliseconds(200), [this] { return closing_; });
      }
    }
    if (queue_.empty()) idle_.notify_all();
  }
  idle_.notify_all();
}

absl::Status StepReporter::Close(std::chrono::milliseconds flush) {
  std::unique_lock<std::mutex> l(mu_);
  if (thread_.joinable()) {
    flushing_ = true;
    cv_.notify_all();
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

int64_t StepReporter::requeued() const {
  std::lock_guard<std::mutex> l(mu_);
  return requeued_;
}

int64_t StepReporter::dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

}  // namespace frameworm
