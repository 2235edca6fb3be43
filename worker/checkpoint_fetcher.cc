#include "worker/checkpoint_fetcher.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace frameworm {

CheckpointFetcher::CheckpointFetcher(Fetch fetch, std::function<void()> on_done,
                                     std::function<bool(const std::string&)> waited_on)
    : fetch_(std::move(fetch)),
      on_done_(std::move(on_done)),
      waited_on_(std::move(waited_on)),
      thread_([this] { Loop(); }) {}

CheckpointFetcher::~CheckpointFetcher() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    queue_.clear();
  }
  thread_.join();
}

absl::Status CheckpointFetcher::Enqueue(HeldCheckpoint h) {
  bool superseded = false;
  absl::Status queued = EnqueueOrSupersede(std::move(h), &superseded);
  if (superseded) on_done_();  // their answers
  return queued;
}

absl::Status CheckpointFetcher::EnqueueOrSupersede(HeldCheckpoint h, bool* superseded) {
  absl::MutexLock l(&mu_);
  for (HeldCheckpoint& q : queue_) {
    if (q.job_id == h.job_id && q.step == h.step && q.path == h.path &&
        q.checksum == h.checksum && q.bytes == h.bytes) {
      q.secret = std::move(h.secret);  // the newer ask is the one answered
      q.sources = std::move(h.sources);
      return absl::OkStatus();
    }
  }
  const std::string dir = std::filesystem::path(h.path).parent_path().string();
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->job_id != h.job_id || it->step >= h.step ||
        std::filesystem::path(it->path).parent_path().string() != dir ||
        (waited_on_ && waited_on_(it->path))) {
      ++it;
      continue;
    }
    const int64_t step = it->step;
    done_.emplace_back(std::move(*it),
                       absl::AbortedError(absl::StrCat(
                           "hold of ", h.job_id, "'s checkpoint of step ", step,
                           " superseded by its checkpoint of step ", h.step,
                           " before its fetch began")));
    it = queue_.erase(it);
    *superseded = true;
  }
  if (queue_.size() >= kMaxQueued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hold of ", h.job_id, "'s checkpoint of step ", h.step, " refused: ", kMaxQueued,
        " fetches already wait on this worker"));
  }
  queue_.push_back(std::move(h));
  return absl::OkStatus();
}

bool CheckpointFetcher::PendingWhere(const std::function<bool(const std::string&)>& match) const {
  absl::MutexLock l(&mu_);
  if (!running_.empty() && match(running_)) return true;
  for (const HeldCheckpoint& h : queue_) {
    if (!h.path.empty() && match(h.path)) return true;
  }
  return false;
}

bool CheckpointFetcher::Pending(const std::string& path) const {
  return PendingWhere([&](const std::string& p) { return p == path; });
}

bool CheckpointFetcher::PendingUnder(const std::string& dir) const {
  std::filesystem::path want = std::filesystem::path(dir).lexically_normal();
  if (!want.has_filename()) want = want.parent_path();  // "/a/b/"
  return PendingWhere([&](const std::string& path) {
    return std::filesystem::path(path).lexically_normal().parent_path() == want;
  });
}

std::vector<std::pair<HeldCheckpoint, absl::Status>> CheckpointFetcher::TakeDone() {
  absl::MutexLock l(&mu_);
  return std::exchange(done_, {});
}

void CheckpointFetcher::Loop() {
  for (;;) {
    HeldCheckpoint h;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_.load() || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      h = std::move(queue_.front());
      queue_.pop_front();
      running_ = h.path;
    }
    absl::Status s = fetch_(h, stop_);
    {
      absl::MutexLock l(&mu_);
      running_.clear();
      done_.emplace_back(std::move(h), std::move(s));
    }
    on_done_();
  }
}

}  // namespace frameworm
