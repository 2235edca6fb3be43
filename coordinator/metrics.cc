#include "coordinator/metrics.h"

#include <algorithm>
#include <numeric>

namespace frameworm::coordinator {

const v1::AggregatedStep* MetricAggregator::Add(int64_t generation,
                                                int world_size,
                                                const v1::StepMetrics& m,
                                                int64_t unix_ms) {
  auto [where, inserted] = steps_.try_emplace(m.step());
  if (inserted && Has(m.step()) && generation == generation_ && m.step() >= generation_first_ &&
      m.step() <= generation_last_) {
    steps_.erase(where);  // late: the stored aggregate stays (see the header)
    ++late_reports_;
    return nullptr;
  }
  NoteGeneration(generation, m.step());
  v1::AggregatedStep& s = where->second;
  double& weight = weights_[m.step()];
  if (inserted && !Has(m.step())) {  // a new step of the history
    stored_.insert(std::upper_bound(stored_.begin(), stored_.end(), m.step()), m.step());
  }
  if (s.generation() != generation) {  // new step, or re-run by a newer gen
    s.Clear();
    weight = 0;
    s.set_step(m.step());
    s.set_generation(generation);
  }
  while (s.rank_step_seconds_size() < world_size) s.add_rank_step_seconds(0);
  while (s.rank_wait_seconds_size() < world_size) s.add_rank_wait_seconds(0);
  while (s.rank_data_seconds_size() < world_size) s.add_rank_data_seconds(0);
  const int r = m.rank();
  if (s.rank_step_seconds(r) > 0) {
    return nullptr;  // duplicate report of this rank for this step
  }
  // Weight: samples when given, else 1 per rank.
  const double w = m.samples() > 0 ? static_cast<double>(m.samples()) : 1.0;
  for (const auto& [key, value] : m.values()) {
    auto& mean = (*s.mutable_mean())[key];
    mean = (mean * weight + value * w) / (weight + w);
  }
  weight += w;
  s.set_epoch(std::max(s.epoch(), m.epoch()));
  s.set_ranks_reported(s.ranks_reported() + 1);
  s.set_samples(s.samples() + m.samples());
  // A rank that reports a zero step time still counts as reported.
  s.set_rank_step_seconds(r, m.step_seconds() > 0 ? m.step_seconds() : 1e-9);
  s.set_rank_wait_seconds(r, m.wait_seconds());
  s.set_rank_data_seconds(r, m.data_seconds());
  s.set_unix_ms(unix_ms);

  if (static_cast<int>(windows_.size()) < world_size) windows_.resize(world_size);
  if (static_cast<int>(reported_.size()) < world_size) reported_.resize(world_size, 0);
  auto& win = windows_[r];
  // Busy time: in a synchronous step every rank's step_seconds is about the
  // same (the fast ones wait for the slow one inside the collective); what
  // differs is the time a rank spent on its own work. Warm-up reports are
  // left out.
  if (reported_[r]++ >= options_.warmup) {
    win.push_back(std::max(0.0, m.step_seconds() - m.wait_seconds()) + m.data_seconds());
    while (static_cast<int>(win.size()) > options_.window) win.pop_front();
  }
  // Straggler flags change only when a step completes (every rank's window
  // has its newest entry): computed once then, O(K log K) per step. An
  // incomplete step shows the flags of the last completed one.
  if (s.ranks_reported() == world_size) {
    last_stragglers_ = Stragglers();
    ++straggler_computations_;
  }
  s.clear_stragglers();
  for (int straggler : last_stragglers_) s.add_stragglers(straggler);
  Touch(m.step());
  return &steps_.at(m.step());
}

void MetricAggregator::NoteGeneration(int64_t generation, int64_t step) {
  if (generation > generation_) {
    generation_ = generation;
    generation_first_ = generation_last_ = step;
  } else if (generation == generation_) {
    generation_first_ = std::min(generation_first_, step);
    generation_last_ = std::max(generation_last_, step);
  }
}

bool MetricAggregator::Has(int64_t step) const {
  return std::binary_search(stored_.begin(), stored_.end(), step);
}

void MetricAggregator::Touch(int64_t step) {
  // Already the most recently updated (the other ranks of the same step):
  // nothing moves.
  if (!by_touch_.empty() && by_touch_.rbegin()->second == step) return;
  if (auto it = touched_.find(step); it != touched_.end()) by_touch_.erase(it->second);
  touched_[step] = next_touch_;
  by_touch_[next_touch_++] = step;
  const size_t cap = std::max<size_t>({1, options_.memory_steps, memory_floor_});
  while (steps_.size() > cap) {
    auto oldest = by_touch_.begin();
    const int64_t gone = oldest->second;
    by_touch_.erase(oldest);
    touched_.erase(gone);
    steps_.erase(gone);
    weights_.erase(gone);
    evicted_below_ = std::max(evicted_below_, gone + 1);
  }
}

std::vector<int> MetricAggregator::Stragglers() const {
  // Window means of the ranks with a full window (-1: not yet full).
  std::vector<double> means(windows_.size(), -1);
  std::vector<double> sorted;
  for (size_t r = 0; r < windows_.size(); ++r) {
    const auto& w = windows_[r];
    if (static_cast<int>(w.size()) < options_.window || w.empty()) continue;
    means[r] = std::accumulate(w.begin(), w.end(), 0.0) / w.size();
    sorted.push_back(means[r]);
  }
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  std::vector<int> out;
  if (n < 2) return out;
  // The median of the other ranks' means: `sorted` without one copy of this
  // rank's mean (which copy does not matter, equal values are equal).
  const size_t m = n - 1;
  for (size_t r = 0; r < means.size(); ++r) {
    if (means[r] < 0) continue;
    const size_t p = static_cast<size_t>(
        std::lower_bound(sorted.begin(), sorted.end(), means[r]) -
        sorted.begin());
    auto other = [&](size_t i) { return i < p ? sorted[i] : sorted[i + 1]; };
    const double median =
        m % 2 ? other(m / 2) : (other(m / 2 - 1) + other(m / 2)) / 2;
    if (median > 0 && means[r] > options_.straggler_factor * median)
      out.push_back(static_cast<int>(r));
  }
  return out;
}

void MetricAggregator::Restore(const v1::AggregatedStep& s) {
  if (!Has(s.step()))
    stored_.insert(std::upper_bound(stored_.begin(), stored_.end(), s.step()), s.step());
  NoteGeneration(s.generation(), s.step());
  steps_[s.step()] = s;
  weights_[s.step()] = s.samples() > 0 ? static_cast<double>(s.samples())
                                       : static_cast<double>(s.ranks_reported());
  Touch(s.step());
}

std::vector<v1::AggregatedStep> MetricAggregator::Since(
    int64_t since_step) const {
  std::vector<v1::AggregatedStep> out;
  for (auto it = steps_.upper_bound(since_step); it != steps_.end(); ++it)
    out.push_back(it->second);
  return out;
}

std::vector<int64_t> MetricAggregator::Thin(size_t limit, size_t trigger) {
  std::vector<int64_t> removed;
  const size_t n = stored_.size();
  if (limit == 0 || n <= std::max(limit, trigger)) return removed;
  const size_t tail = limit / 2;     // newest steps, kept whole
  const size_t old = n - tail;       // candidates, oldest first
  const size_t want = limit - tail;  // of them kept, evenly spaced
  std::vector<int64_t> kept;
  kept.reserve(limit);
  size_t next_kept = 0, taken = 0;
  for (size_t index = 0; index < n; ++index) {
    const int64_t step = stored_[index];
    // Keep index floor(k * old / want) for k = 0..want-1, and the tail.
    if (index >= old || (taken < want && index == next_kept)) {
      if (index < old) next_kept = ++taken * old / want;
      kept.push_back(step);
      continue;
    }
    removed.push_back(step);
    if (auto t = touched_.find(step); t != touched_.end()) {
      by_touch_.erase(t->second);
      touched_.erase(t);
    }
    steps_.erase(step);
    weights_.erase(step);
  }
  stored_ = std::move(kept);
  return removed;
}

const v1::AggregatedStep* MetricAggregator::Last() const {
  return steps_.empty() ? nullptr : &steps_.rbegin()->second;
}

}  // namespace frameworm::coordinator
