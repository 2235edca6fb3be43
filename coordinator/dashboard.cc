#include "coordinator/dashboard.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/access.h"
#include "coordinator/dashboard_page.h"
#include "coordinator/paging.h"
#include "frameworm/v1/job_service.pb.h"
#include "google/protobuf/util/json_util.h"
#include "common/printable.h"

namespace frameworm::coordinator {
namespace {

constexpr int64_t kLogTailBytes = 16 * 1024;
constexpr int kEventsShown = 200;

HttpResponse Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(m, &out, opts).ok()) {
    return HttpResponse{500, "text/plain; charset=utf-8", "cannot render JSON\n"};
  }
  return HttpResponse{200, "application/json", out};
}

HttpResponse Error(const absl::Status& s) {
  int code = 500;
  switch (s.code()) {
    case absl::StatusCode::kPermissionDenied: code = 403; break;
    case absl::StatusCode::kNotFound: code = 404; break;
    case absl::StatusCode::kInvalidArgument: code = 400; break;
    default: break;
  }
  return HttpResponse{code, "text/plain; charset=utf-8", std::string(s.message()) + "\n"};
}

// Job ids are the coordinator's own ("job-000001"): letters, digits, '-'.
bool PlausibleJobId(const std::string& id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_';
         });
}

}  // namespace

HttpResponse Dashboard::Handle(const HttpRequest& r) const {
  if (r.path == "/" || r.path == "/index.html") {
    HttpResponse page{200, "text/html; charset=utf-8", kDashboardHtml};
    page.headers = {{"Content-Security-Policy",
                     "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"},
                    {"X-Frame-Options", "DENY"}};
    return page;
  }
  if (r.path == "/app.js") return HttpResponse{200, "text/javascript; charset=utf-8", kDashboardJs};
  if (absl::Status s = CheckJobClient(r.caller); !s.ok()) return Error(s);
  if (r.path == "/api/jobs") {
    // Paged as ListJobs is (page_size, page_token): no response grows with
    // the number of jobs the coordinator keeps.
    int size = 0;
    std::string token;
    for (absl::string_view kv : absl::StrSplit(r.query, '&', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&kv, "page_size=")) {
        if (!absl::SimpleAtoi(kv, &size)) {
          return Error(absl::InvalidArgumentError("page_size must be a number"));
        }
      } else if (absl::ConsumePrefix(&kv, "page_token=")) {
        if (kv.size() > 64) return Error(absl::InvalidArgumentError("malformed page_token"));
        token = std::string(kv);
      }
    }
    auto page = TakeJobPage(JobsSeenBy(r.caller, core_->ListJobs()), size, token);
    if (!page.ok()) return Error(page.status());
    v1::ListJobsResponse out;
    for (auto& j : page->items) *out.add_jobs() = std::move(j);
    out.set_next_page_token(page->next_token);
    return Json(out);
  }
  if (r.path == "/api/workers") {
    v1::ListWorkersResponse out;
    for (auto& w : core_->ListWorkers()) *out.add_workers() = std::move(w);
    return Json(out);
  }
  constexpr absl::string_view kJobs = "/api/jobs/";
  if (absl::StartsWith(r.path, kJobs)) {
    std::vector<std::string> parts = absl::StrSplit(r.path.substr(kJobs.size()), '/');
    if (parts.size() > 2) return Error(absl::NotFoundError("no such page"));
    if (!PlausibleJobId(parts[0])) return Error(absl::InvalidArgumentError("malformed job id"));
    return Job(r, parts[0], parts.size() == 2 ? parts[1] : "");
  }
  return Error(absl::NotFoundError(absl::StrCat("no page ", PrintableLine(r.path, 200))));
}

HttpResponse Dashboard::Job(const HttpRequest& r, const std::string& id,
                            const std::string& what) const {
  absl::StatusOr<std::string> owner = core_->JobOwner(id);
  if (!owner.ok()) return Error(owner.status());
  if (absl::Status s = CheckJobAccess(r.caller, id, *owner); !s.ok()) return Error(s);
  if (what.empty()) {
    absl::StatusOr<v1::JobStatus> st = core_->GetJob(id);
    return st.ok() ? Json(*st) : Error(st.status());
  }
  if (what == "metrics") {
    auto steps = core_->GetMetrics(id, 0);
    if (!steps.ok()) return Error(steps.status());
    v1::GetMetricsResponse out;
    for (auto& s : *steps) *out.add_steps() = std::move(s);
    return Json(out);
  }
  if (what == "events") {
    // Only the newest are read (a job keeps up to max_events_per_job).
    auto all = core_->ListNewestEvents(id, kEventsShown);
    if (!all.ok()) return Error(all.status());
    v1::ListEventsResponse out;
    if (!all->empty()) out.set_next_after_seq(all->back().seq());
    for (auto& e : *all) *out.add_events() = std::move(e);
    return Json(out);
  }
  if (what == "logs") {
    int rank = 0;
    for (absl::string_view kv : absl::StrSplit(r.query, '&', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&kv, "rank=") && !absl::SimpleAtoi(kv, &rank)) {
        return Error(absl::InvalidArgumentError("rank must be a number"));
      }
    }
    if (absl::Status s = core_->CheckLogRequest(id, rank, 0); !s.ok() || rank < 0) {
      return Error(s.ok() ? absl::InvalidArgumentError("rank must be >= 0") : s);
    }
    const JobLogs& logs = core_->logs();
    std::error_code ec;
    const int64_t size = static_cast<int64_t>(std::filesystem::file_size(logs.Path(id, rank), ec));
    if (ec) return HttpResponse{200, "text/plain; charset=utf-8", ""};  // nothing logged yet
    auto chunk = logs.Read(id, rank, std::max<int64_t>(0, size - kLogTailBytes), kLogTailBytes);
    if (!chunk.ok()) return Error(chunk.status());
    return HttpResponse{200, "text/plain; charset=utf-8", chunk->data};
  }
  return Error(absl::NotFoundError(absl::StrCat("no page for job ", id, ": ", PrintableLine(what, 100))));
}

}  // namespace frameworm::coordinator
