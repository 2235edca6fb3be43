#include "trainer/checkpoint_uploader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/checkpoint_handover.h"

namespace frameworm {

CheckpointUploader::CheckpointUploader(std::unique_ptr<ControlChannel> channel,
                                       std::string checkpoint_dir, std::string memory_dir,
                                       Failed failed, absl::Duration retry_pause)
    : channel_(std::move(channel)),
      checkpoint_dir_(std::move(checkpoint_dir)),
      memory_dir_(std::move(memory_dir)),
      failed_(std::move(failed)),
      retry_pause_(retry_pause),
      thread_([this] { Loop(); }) {}

CheckpointUploader::~CheckpointUploader() {
  Drain();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointUploader::Submit(CheckpointReport report) {
  std::optional<CheckpointReport> superseded;
  const int64_t step = report.step;
  {
    std::lock_guard<std::mutex> l(mu_);
    // The same file written again (a step saved twice) is not superseded.
    if (waiting_ && waiting_->path != report.path) superseded = std::move(waiting_);
    waiting_ = std::move(report);
  }
  cv_.notify_all();
  if (superseded) {
    RemoveCheckpointIn(checkpoint_dir_, superseded->path);
    if (failed_) {
      failed_(*superseded,
              absl::AbortedError(absl::StrCat("superseded by the checkpoint of step ", step,
                                               " before its upload began")));
    }
  }
}

bool CheckpointUploader::Drain(absl::Duration timeout) {
  std::unique_lock<std::mutex> l(mu_);
  auto done = [&] { return !waiting_ && !busy_; };
  if (timeout == absl::InfiniteDuration()) {
    cv_.wait(l, done);
    return true;
  }
  return cv_.wait_for(l, absl::ToChronoNanoseconds(timeout), done);
}

int64_t CheckpointUploader::InFlightStep() {
  std::lock_guard<std::mutex> l(mu_);
  return std::max(busy_ ? busy_step_ : 0, waiting_ ? waiting_->step : 0);
}

void CheckpointUploader::Loop() {
  for (;;) {
    CheckpointReport report;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || waiting_.has_value(); });
      if (!waiting_) return;  // stopped with nothing left
      report = std::move(*waiting_);
      waiting_.reset();
      busy_ = true;
      busy_step_ = report.step;
    }
    absl::Status s = HandOverCheckpoint(*channel_, report, checkpoint_dir_, memory_dir_, retry_pause_);
    if (!s.ok() && failed_) failed_(report, s);
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
      busy_step_ = 0;
    }
    cv_.notify_all();
  }
}

}  // namespace frameworm
