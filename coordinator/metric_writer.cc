#include "coordinator/metric_writer.h"

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {

std::unique_ptr<MetricWriter> MetricWriter::Create(Store* store, Committed committed) {
  std::unique_ptr<MetricWriter> w(new MetricWriter(store, std::move(committed)));
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
    staged_.insert_or_assign(std::move(key), std::move(*row));
  }
  waiters_.push_back(std::move(done));
}

int64_t MetricWriter::commits() const {
  absl::MutexLock l(&mu_);
  return commits_;
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
      waiters.swap(waiters_);
      ++commits_;
    }
    std::vector<MetricRow> rows;
    rows.reserve(batch.size());
    for (auto& [key, row] : batch) rows.push_back(std::move(row));
    absl::Status s = store_->PutMetrics(rows);
    if (s.ok() && committed_ && !rows.empty()) committed_(rows);
    if (!s.ok()) {
      s = absl::UnavailableError(
          absl::StrCat("metric not committed, retry: ", s.message()));
      absl::MutexLock l(&mu_);
      for (MetricRow& row : rows) {
        auto key = std::make_pair(row.job_id, row.step);
        staged_.try_emplace(std::move(key), std::move(row));  // newer wins
      }
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
