// The coordinator's web dashboard (README "Operating a cluster"): the page
// (dashboard_page.h) and the JSON API it reads, answered from the same
// Coordinator views and with the same access rules as the JobService
// (coordinator/access.h): the request's Caller is the HTTPS client
// certificate's (or kLocal on plaintext, which the coordinator's main only
// allows where its gRPC API is plaintext too).
//
//   GET /                          the page;  GET /app.js  its script
//   GET /api/jobs                  {"jobs": [JobStatus...]} the caller may see,
//                                  a page as ListJobs gives (?page_size=N,
//                                  default 500, at most 1,000; ?page_token=
//                                  the last page's next_page_token)
//   GET /api/workers               ListWorkersResponse
//   GET /api/jobs/ID               JobStatus
//   GET /api/jobs/ID/metrics       GetMetricsResponse (every kept step)
//   GET /api/jobs/ID/events        ListEventsResponse (the newest 200)
//   GET /api/jobs/ID/logs?rank=R   the last 16 KiB of rank R's log, text
// JSON uses proto field names. Errors: 403 (PERMISSION_DENIED), 404 (an
// unknown job or path), 400 (a malformed id or rank), with the message.
//
// Thread safety: thread-safe (the Coordinator is).
#ifndef FRAMEWORM_COORDINATOR_DASHBOARD_H_
#define FRAMEWORM_COORDINATOR_DASHBOARD_H_

#include "coordinator/coordinator.h"
#include "rpc/http_server.h"

namespace frameworm::coordinator {

class Dashboard {
 public:
  // `core` is not owned and must outlive the dashboard.
  explicit Dashboard(Coordinator* core) : core_(core) {}
  HttpResponse Handle(const HttpRequest& request) const;

 private:
  HttpResponse Job(const HttpRequest& request, const std::string& id,
                   const std::string& what) const;
  Coordinator* const core_;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_DASHBOARD_H_
