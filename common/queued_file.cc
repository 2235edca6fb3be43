#include "common/queued_file.h"

#include <utility>

namespace frameworm {

absl::StatusOr<std::unique_ptr<QueuedFile>> QueuedFile::Create(const std::string& path,
                                                               int64_t expected_bytes,
                                                               size_t max_queued) {
  if (max_queued < 1) return absl::InvalidArgumentError("max_queued must be at least 1");
  absl::StatusOr<std::unique_ptr<ReceivedFile>> f = ReceivedFile::Create(path, expected_bytes);
  if (!f.ok()) return f.status();
  return std::unique_ptr<QueuedFile>(new QueuedFile(*std::move(f), max_queued));
}

QueuedFile::QueuedFile(std::unique_ptr<ReceivedFile> file, size_t max_queued)
    : file_(std::move(file)), max_queued_(max_queued), thread_([this] { Run(); }) {}

QueuedFile::~QueuedFile() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closing_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
  // file_ goes with its partial file unless Commit renamed it.
}

void QueuedFile::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing
    std::string chunk = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    cv_.notify_all();  // room in the queue
    l.unlock();
    absl::Status s = error_.ok() ? file_->Append(chunk) : absl::OkStatus();
    l.lock();
    if (spare_.size() < max_queued_) {
      chunk.clear();
      spare_.push_back(std::move(chunk));
    }
    writing_ = false;
    if (!s.ok() && error_.ok()) error_ = s;
    cv_.notify_all();
  }
}

absl::Status QueuedFile::Append(std::string&& data) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return !error_.ok() || queue_.size() < max_queued_; });
  if (!error_.ok()) return error_;
  queue_.push_back(std::move(data));
  cv_.notify_all();
  return absl::OkStatus();
}

std::string QueuedFile::Spare() {
  std::lock_guard<std::mutex> l(mu_);
  if (spare_.empty()) return std::string();
  std::string s = std::move(spare_.front());
  spare_.pop_front();
  return s;
}

absl::Status QueuedFile::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return !error_.ok() || (queue_.empty() && !writing_); });
  return error_;
}

absl::Status QueuedFile::Commit(const std::string& checksum) {
  if (absl::Status s = Drain(); !s.ok()) return s;
  return file_->Commit(checksum);
}

}  // namespace frameworm
