#include "coordinator/metric_writer.h"

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
    staged_bytes_ += Bytes(*row);
    auto [it, added] = staged_.try_emplace(std::move(key));
    if (!added) staged_bytes_ -= Bytes(it->second);
    it->second = std::move(*row);
  }
  waiters_.push_back(std::move(done));
}

int64_t MetricWriter::commits() const {
  absl::MutexLock l(&mu_);
  return commits_;
}

int64_t MetricWriter::backlog_bytes() const {
  absl::MutexLock l(&mu_);
  return staged_bytes_ + in_flight_bytes_;
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
      in_flight_bytes_ = staged_bytes_;
      staged_bytes_ = 0;
      waiters.swap(waiters_);
      ++commits_;
    }
    std::vector<MetricRow> rows;
    rows.reserve(batch.size());
    for (auto& [key, row] : batch) rows.push_back(std::move(row));
    absl::Status s = store_->PutMetrics(rows);
    if (s.ok() && committed_ && !rows.empty()) committed_(rows);
    if (!s.ok()) {
      absl::MutexLock l(&mu_);
      last_error_ = s;
      s = absl::UnavailableError(
          absl::StrCat("metric not committed, retry: ", s.message()));
      in_flight_bytes_ = 0;
      for (MetricRow& row : rows) {
        auto key = std::make_pair(row.job_id, row.step);
        const int64_t bytes = Bytes(row);
        if (staged_.try_emplace(std::move(key), std::move(row)).second) {  // newer wins
          staged_bytes_ += bytes;
        }
      }
    } else {
      absl::MutexLock l(&mu_);
      last_error_ = absl::OkStatus();
      in_flight_bytes_ = 0;
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
