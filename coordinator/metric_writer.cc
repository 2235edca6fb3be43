#include "coordinator/metric_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {

std::unique_ptr<MetricWriter> MetricWriter::Create(Store* store, Committed committed,
                                                   int64_t max_backlog_bytes) {
  std::unique_ptr<MetricWriter> w(
      new MetricWriter(store, std::move(committed), max_backlog_bytes));
  w->thread_ = std::thread([p = w.get()] { p->Run(); });
  return w;
}

MetricWriter::~MetricWriter() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void MetricWriter::Stage(std::optional<MetricRow> row, Done done) {
  absl::MutexLock l(&mu_);
  if (row) {
    auto key = std::make_pair(row->job_id, row->step);
    auto [it, added] = staged_.try_emplace(std::move(key));
    const int64_t delta = Bytes(*row) - (added ? 0 : Bytes(it->second));
    it->second = std::move(*row);
    staged_bytes_ += delta;
    backlog_bytes_ += delta;
  }
  waiters_.push_back(std::move(done));
}

int64_t MetricWriter::commits() const {
  absl::MutexLock l(&mu_);
  return commits_;
}

bool MetricWriter::Full() const { return backlog_bytes() >= max_backlog_bytes_; }

absl::Status MetricWriter::last_error() const {
  absl::MutexLock l(&mu_);
  return last_error_;
}

void MetricWriter::Run() {
  for (;;) {
    std::map<std::pair<std::string, int64_t>, MetricRow> batch;
    std::vector<Done> waiters;
    int64_t batch_bytes = 0;
    bool stopping;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](MetricWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->stop_ || !w->waiters_.empty();
          },
          this));
      stopping = stop_;
      if (stopping && waiters_.empty() && staged_.empty()) return;
      batch.swap(staged_);
      batch_bytes = std::exchange(staged_bytes_, 0);
      waiters.swap(waiters_);
      ++commits_;
    }
    std::vector<MetricRow> rows;
    rows.reserve(batch.size());
    for (auto& [key, row] : batch) rows.push_back(std::move(row));
    absl::Status s = store_->PutMetrics(rows);
    if (s.ok() && committed_ && !rows.empty()) committed_(rows);
    {
      absl::MutexLock l(&mu_);
      last_error_ = s;
      backlog_bytes_ -= batch_bytes;
      // A failed batch is staged again, but for the rows of a key that a
      // newer row was staged under meanwhile.
      for (size_t i = 0; !s.ok() && i < rows.size(); ++i) {
        const int64_t bytes = Bytes(rows[i]);
        auto key = std::make_pair(rows[i].job_id, rows[i].step);
        if (staged_.try_emplace(std::move(key), std::move(rows[i])).second) {
          staged_bytes_ += bytes;
          backlog_bytes_ += bytes;
        }
      }
    }
    if (!s.ok()) {
      s = absl::UnavailableError(absl::StrCat("metric not committed, retry: ", s.message()));
    }
    for (Done& done : waiters) done(s);
    // On shutdown a failed commit is final: nobody will stage again.
    if (stopping && !s.ok()) {
      std::vector<Done> late;
      {
        absl::MutexLock l(&mu_);
        late.swap(waiters_);
      }
      for (Done& done : late) done(s);
      return;
    }
  }
}

}  // namespace frameworm::coordinator
