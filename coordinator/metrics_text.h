// The coordinator's Prometheus metrics (/metrics, text format) from the
// views the JobService also serves: jobs by state; per job its generation,
// restarts, step, planned steps, mean metric values of the newest step
// (loss, accuracy, ...), samples/s, each rank's step time and the number of
// flagged stragglers; per worker its slots, free slots, liveness and
// heartbeat age. Labels: job_id (not "job", which Prometheus sets to the scrape job), name, worker,
// rank, metric, state.
//
// Thread safety: a pure function.
#ifndef FRAMEWORM_COORDINATOR_METRICS_TEXT_H_
#define FRAMEWORM_COORDINATOR_METRICS_TEXT_H_

#include <cstdint>
#include <vector>

#include "common/prometheus_text.h"
#include "frameworm/v1/common.pb.h"

namespace frameworm::coordinator {

void WriteCoordinatorMetrics(const std::vector<v1::JobStatus>& jobs,
                             const std::vector<v1::WorkerInfo>& workers, int64_t now_unix_ms,
                             PromWriter& w);

// frameworm_metric_backlog_bytes: aggregated metric rows waiting for the
// store (MetricWriter::backlog_bytes), and the bound past which step
// reports are deferred (frameworm_metric_backlog_limit_bytes), so that an
// alert fires while the store fails, before reports are deferred.
void WriteMetricBacklog(int64_t backlog_bytes, int64_t limit_bytes, PromWriter& w);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_METRICS_TEXT_H_
