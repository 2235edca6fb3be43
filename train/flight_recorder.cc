#include "train/flight_recorder.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/collective_text.h"

namespace frameworm {

const char* CollectiveStateName(CollectiveState s) {
  switch (s) {
    case CollectiveState::kEnqueued: return "enqueued";
    case CollectiveState::kStarted: return "started";
    case CollectiveState::kCompleted: return "completed";
    case CollectiveState::kFailed: return "failed";
  }
  return "unknown";
}

std::string DescribeCollective(const CollectiveRecord& r) {
  return CollectiveText(r.seq, r.op, r.what, r.bucket, r.bytes);
}

FlightRecorder::FlightRecorder(size_t capacity, NowNs now)
    : now_(now ? std::move(now) : NowNs([] {
        return static_cast<int64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
      })),
      ring_(capacity) {}

int64_t FlightRecorder::Enqueue(const char* op, const char* what, int bucket, int64_t bytes) {
  if (ring_.empty()) return 0;
  const int64_t t = now_();
  std::lock_guard<std::mutex> l(mu_);
  const int64_t seq = next_seq_++;
  CollectiveRecord& r = ring_[static_cast<size_t>(seq - 1) % ring_.size()];
  r = CollectiveRecord{};
  r.seq = seq;
  r.op = op;
  r.what = what;
  r.bucket = bucket;
  r.bytes = bytes;
  r.enqueued_ns = t;
  return seq;
}

CollectiveRecord* FlightRecorder::FindLocked(int64_t seq) {
  if (seq <= 0 || ring_.empty()) return nullptr;
  CollectiveRecord& r = ring_[static_cast<size_t>(seq - 1) % ring_.size()];
  return r.seq == seq ? &r : nullptr;
}

void FlightRecorder::Started(int64_t seq) {
  if (seq <= 0) return;
  const int64_t t = now_();
  std::lock_guard<std::mutex> l(mu_);
  CollectiveRecord* r = FindLocked(seq);
  if (r == nullptr || r->state != CollectiveState::kEnqueued) return;
  r->started_ns = t;
  r->state = CollectiveState::kStarted;
}

void FlightRecorder::Completed(int64_t seq) {
  if (seq <= 0) return;
  const int64_t t = now_();
  std::lock_guard<std::mutex> l(mu_);
  completed_ = std::max(completed_, seq);
  CollectiveRecord* r = FindLocked(seq);
  if (r == nullptr) return;
  if (r->started_ns == 0) r->started_ns = t;
  r->ended_ns = t;
  r->state = CollectiveState::kCompleted;
}

void FlightRecorder::Failed(int64_t seq) {
  if (seq <= 0) return;
  const int64_t t = now_();
  std::lock_guard<std::mutex> l(mu_);
  CollectiveRecord* r = FindLocked(seq);
  if (r == nullptr) return;
  if (r->started_ns == 0) r->started_ns = t;
  r->ended_ns = t;
  r->state = CollectiveState::kFailed;
}

FlightRecorder::Snapshot FlightRecorder::Take(size_t n) const {
  Snapshot s;
  s.now_ns = now_();
  std::lock_guard<std::mutex> l(mu_);
  s.enqueued = next_seq_ - 1;
  s.completed = completed_;
  const int64_t kept = std::min<int64_t>(s.enqueued, static_cast<int64_t>(ring_.size()));
  const int64_t count = std::min<int64_t>(kept, static_cast<int64_t>(n));
  for (int64_t seq = s.enqueued - count + 1; seq <= s.enqueued; ++seq) {
    s.recent.push_back(ring_[static_cast<size_t>(seq - 1) % ring_.size()]);
  }
  return s;
}

std::string FlightRecorder::Dump() const {
  const Snapshot s = Take(ring_.size());
  std::string out;
  for (const CollectiveRecord& r : s.recent) {
    absl::StrAppend(&out, DescribeCollective(r), " ", CollectiveStateName(r.state),
                    absl::StrFormat(" (enqueued %.3f s ago", (s.now_ns - r.enqueued_ns) / 1e9));
    if (r.ended_ns > 0) {
      absl::StrAppend(&out, absl::StrFormat(", took %.3f s", (r.ended_ns - r.enqueued_ns) / 1e9));
    } else if (r.started_ns > 0) {
      absl::StrAppend(&out, absl::StrFormat(", waited %.3f s so far", (s.now_ns - r.started_ns) / 1e9));
    }
    absl::StrAppend(&out, ")\n");
  }
  return out;
}

}  // namespace frameworm
