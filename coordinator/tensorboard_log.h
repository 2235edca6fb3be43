// TensorBoard event files per job, written by the coordinator from the
// aggregated metrics (docs/ARCHITECTURE.md "Events"): under
// <root>/<job id>/events.out.tfevents.<unix seconds>.frameworm, one record
// per completed step (every rank reported) with a scalar per mean value
// (loss, accuracy, ...), samples_per_second and step_seconds (the slowest
// rank's). Records are TFRecords: a little-endian uint64 length, its masked
// CRC-32C, the serialized tensorflow.Event (hand-encoded: wall_time, step,
// summary { value { tag, simple_value } }), its masked CRC-32C; the first
// record of a file is the file_version "brain.Event:2". A step re-run after
// a restart is written again (TensorBoard shows the later one).
//
// A file that cannot be written is reported once per job on stderr and
// skipped: TensorBoard files are a view, never a reason to lose a report.
//
// Bounded: once what was appended to a job's file since it was made
// (or compacted) would pass `max_job_bytes`, the job's history is rewritten from the store (`store`, whose metric rows
// the coordinator thins to a few thousand steps per job, spread over the
// whole run) into a new file, and the job's older event files (also those
// of earlier coordinator runs) are deleted, so a job's directory holds at
// most about `max_job_bytes` plus its thinned history, however long it
// runs. The new file is written under a temporary name and renamed; its
// name's timestamp is later than the file it replaces, so TensorBoard reads
// it after (and, seeing steps start again, drops what it had shown of the
// old one). TensorBoard itself keeps about 1,000 points per scalar. A store
// that cannot be read leaves the file growing (reported once per job).
//
// Thread safety: thread-safe (one mutex); Append runs on the MetricWriter's
// thread, RemoveJob on the coordinator's bounded-growth path.
#ifndef FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_
#define FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store.h"
#include "frameworm/v1/common.pb.h"

namespace frameworm::coordinator {

class TensorBoardLog {
 public:
  static constexpr int64_t kMaxJobBytes = int64_t{8} << 20;
  // `store` (not owned, may be null: files are never compacted) holds the
  // rows Append is given, already committed.
  explicit TensorBoardLog(std::string root, Store* store = nullptr,
                          int64_t max_job_bytes = kMaxJobBytes)
      : root_(std::move(root)), store_(store), max_job_bytes_(max_job_bytes) {}

  // Writes the completed steps among `rows` (MetricRow.aggregate holds a
  // serialized AggregatedStep); partial steps wait for their last rank.
  void Append(const std::vector<MetricRow>& rows) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's directory, <root>/<job id>.
  std::string Dir(const std::string& job_id) const;
  // Deletes the job's directory (the job expired).
  void RemoveJob(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct File {
    std::string path;
    int64_t stamp = 0;  // the Unix seconds in its name
    int64_t bytes = 0;
    int64_t compacted = 0;  // of which the history it was compacted from
  };
  // A new file of the job's history read from the store, replacing every
  // event file of the job; false (nothing changed) when the store cannot be
  // read or the file cannot be written.
  bool Compact(const std::string& job, File& file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string root_;
  Store* const store_;
  const int64_t max_job_bytes_;
  absl::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);  // job -> its file
  std::set<std::string> failed_ ABSL_GUARDED_BY(mu_);  // jobs whose failure was logged
};

// CRC-32C (Castagnoli) of `data`, and TFRecord's masking of it.
uint32_t Crc32c(const std::string& data);
uint32_t MaskedCrc32c(const std::string& data);
// One TFRecord around `payload`.
std::string TfRecord(const std::string& payload);
// A serialized tensorflow.Event: wall_time, step and scalar values.
std::string ScalarEvent(double wall_time, int64_t step,
                        const std::vector<std::pair<std::string, float>>& scalars);
// The tensorflow.Event that opens a file (file_version "brain.Event:2").
std::string FileVersionEvent(double wall_time);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_
