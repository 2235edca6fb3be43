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
// Thread safety: thread-safe (one mutex); Append runs on the MetricWriter's
// thread, RemoveJob on the coordinator's bounded-growth path.
#ifndef FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_
#define FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_

#include <cstdint>
#include <map>
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
  explicit TensorBoardLog(std::string root) : root_(std::move(root)) {}

  // Writes the completed steps among `rows` (MetricRow.aggregate holds a
  // serialized AggregatedStep); partial steps wait for their last rank.
  void Append(const std::vector<MetricRow>& rows) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's directory, <root>/<job id>.
  std::string Dir(const std::string& job_id) const;
  // Deletes the job's directory (the job expired).
  void RemoveJob(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string root_;
  absl::Mutex mu_;
  std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);  // job -> its file
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
