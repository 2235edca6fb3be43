#include "coordinator/job.h"

namespace frameworm::coordinator {

JobRow RowOf(const Job& job) {
  JobRow r;
  r.job_id = job.id;
  r.seq = job.seq;
  job.spec.SerializeToString(&r.spec);
  r.state = job.state;
  r.generation = job.generation;
  r.restarts = job.restarts;
  r.reason = job.reason;
  r.submitted_ms = job.submitted_ms;
  r.started_ms = job.started_ms;
  r.finished_ms = job.finished_ms;
  return r;
}

}  // namespace frameworm::coordinator
