// Cross-rank metric aggregation for one job: per step, the sample-weighted
// mean of every value across ranks, each rank's step, wait and data time,
// and straggler flags: a rank whose mean busy time (step_seconds -
// wait_seconds + data_seconds: its own compute and data loading, without
// the time it waited for the others in the gradient collectives) over the
// last `window` steps exceeds the median of the other ranks' means by
// `straggler_factor`. With synchronous collectives every rank's step time
// is the slowest rank's, so only the busy time tells which one is slow; a
// trainer that reports no wait or data time is judged by its step time. The flags
// are computed once per step, when its last rank reports (O(K log K) per
// step); until then a step carries the flags of the last completed step.
//
// A step re-run by a newer generation (after a restart from a checkpoint)
// replaces the older generation's aggregate of that step. A rank reporting
// the same step twice in one generation (a retried RPC) counts once.
//
// Memory: only the `memory_steps` most recently updated aggregates stay in
// memory (the tail a follower reads, and any step being re-run); the rest
// of the history lives in the Store, which the owner reads for older steps
// (Since() says from which step on memory is complete). The numbers of all
// stored steps are kept (8 bytes each) for Thin.
//
// Thread safety: not thread-safe; owned by the Coordinator under its mutex.
#ifndef FRAMEWORM_COORDINATOR_METRICS_H_
#define FRAMEWORM_COORDINATOR_METRICS_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "frameworm/v1/common.pb.h"

namespace frameworm::coordinator {

class MetricAggregator {
 public:
  struct Options {
    double straggler_factor = 1.5;
    int window = 5;
    size_t memory_steps = 256;  // aggregates kept in memory (>= 1)
    // Each rank's first `warmup` reports after a (re)start stay out of its
    // window: the first steps of a process include one-time work (oneDNN
    // JIT kernels, allocator growth) that differs between ranks.
    int warmup = 0;
  };
  explicit MetricAggregator(const Options& options) : options_(options) {}

  // Adds one rank's report (rank < world_size) made in `generation`.
  // Returns the step's updated aggregate, or nullptr for a duplicate. A
  // report of a step that this generation already reported and whose
  // aggregate has left memory (a rank's report sent again after its answer
  // was lost, or delayed past memory_steps newer steps) is not merged
  // either (nullptr; counted in late_reports()): its stored aggregate stays,
  // where a fresh one would have replaced it with this rank's alone. A
  // newer generation's report of such a step replaces it (a re-run).
  const v1::AggregatedStep* Add(int64_t generation, int world_size,
                                const v1::StepMetrics& m, int64_t unix_ms);
  // Restores a stored aggregate (after a coordinator restart).
  void Restore(const v1::AggregatedStep& s);
  // Forgets the per-rank step-time windows (a new generation starts), and
  // any KeepInMemory.
  void ResetWindows() {
    windows_.clear();
    reported_.clear();
    last_stragglers_.clear();
    memory_floor_ = 0;
  }
  // Keeps at least `steps` aggregates in memory from now on (until
  // ResetWindows): after reports were deferred (the store failing), each
  // rank sends its queue again from its own moment, so one rank's report
  // of a step can come thousands of steps after another's; with the
  // aggregate still in memory it is merged, not left out as late.
  void KeepInMemory(size_t steps) { memory_floor_ = std::max(memory_floor_, steps); }

  // The in-memory steps with step > since_step, in order. When
  // since_step < evicted_below() - 1, stored steps in between may be missing
  // here: the caller reads them from the store (memory wins for a step in
  // both).
  std::vector<v1::AggregatedStep> Since(int64_t since_step) const;
  // One more than the highest step ever evicted from memory (0: none).
  int64_t evicted_below() const { return evicted_below_; }
  // Whether `step` is in the history (memory or store).
  bool Has(int64_t step) const;
  // Bounds the history: once it holds more than `trigger` steps, it is
  // thinned to `limit` (limit <= trigger): the newest limit/2 steps stay
  // whole, the older ones are resampled evenly (the oldest step is always
  // kept), so a loss curve keeps its shape. Returns the removed steps,
  // ascending (empty when nothing was removed or limit is 0).
  std::vector<int64_t> Thin(size_t limit, size_t trigger);
  // Steps in the history (memory and store).
  size_t size() const { return stored_.size(); }
  size_t in_memory() const { return steps_.size(); }
  // The newest step, or nullptr when none.
  const v1::AggregatedStep* Last() const;
  // Reports left out as late (see Add).
  int64_t late_reports() const { return late_reports_; }
  // How many times the straggler flags were computed (tests).
  int64_t straggler_computations() const { return straggler_computations_; }

 private:
  std::vector<int> Stragglers() const;
  // Marks `step` as just updated; evicts the least recently updated
  // aggregates beyond memory_steps.
  void Touch(int64_t step);
  // Tracks the range of steps reported in the newest generation seen.
  void NoteGeneration(int64_t generation, int64_t step);

  Options options_;
  std::map<int64_t, v1::AggregatedStep> steps_;  // in memory
  std::map<int64_t, double> weights_;  // sum of weights per step in memory
  std::map<int64_t, uint64_t> touched_;  // step -> update sequence
  std::map<uint64_t, int64_t> by_touch_;  // update sequence -> step
  uint64_t next_touch_ = 0;
  std::vector<int64_t> stored_;  // every step of the history, ascending
  int64_t evicted_below_ = 0;
  // The newest generation seen (in reports or restored aggregates) and the
  // lowest and highest step it reported: steps are reported in increasing
  // order, so a stored step in that range holds that generation's aggregate.
  int64_t generation_ = -1;
  int64_t generation_first_ = 0, generation_last_ = -1;
  int64_t late_reports_ = 0;
  std::vector<std::deque<double>> windows_;  // per rank, newest last
  std::vector<int> reported_;  // per rank: reports since the last reset
  std::vector<int> last_stragglers_;  // of the last completed step
  int64_t straggler_computations_ = 0;
  size_t memory_floor_ = 0;  // KeepInMemory's
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_METRICS_H_
