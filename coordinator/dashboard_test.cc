// The dashboard's answers for each kind of caller, on a real Coordinator
// (its gRPC-free views); the page in a real browser is in
// tests/e2e/dashboard_test.cc.
#include "coordinator/dashboard.h"

#include "frameworm/v1/job_service.pb.h"
#include "google/protobuf/util/json_util.h"

#include <filesystem>
#include <string>

#include "common/clock.h"
#include "coordinator/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("dash");
    CoordinatorOptions o;
    o.state_dir = dir_;
    o.advertise = "127.0.0.1:1";
    auto c = Coordinator::Create(o, RealClock::Real());
    ASSERT_TRUE(c.ok()) << c.status();
    core_ = *std::move(c);
    v1::JobSpec spec;
    spec.set_name("alices <b>job");
    alices_ = *core_->SubmitJob(spec, "user:alice");
    spec.set_name("bobs");
    bobs_ = *core_->SubmitJob(spec, "user:bob");
  }
  void TearDown() override {
    core_.reset();
    std::filesystem::remove_all(dir_);
  }
  HttpResponse Get(const std::string& path, Caller who, const std::string& query = "") {
    return Dashboard(core_.get()).Handle(HttpRequest{path, query, who});
  }
  static Caller User(const std::string& name) { return Caller{Caller::Role::kUser, name}; }

  std::string dir_, alices_, bobs_;
  std::unique_ptr<Coordinator> core_;
};

TEST_F(DashboardTest, ThePageAndItsScriptComeWithAStrictPolicy) {
  HttpResponse page = Get("/", Caller{});
  EXPECT_EQ(page.status, 200);
  EXPECT_THAT(page.content_type, HasSubstr("text/html"));
  EXPECT_THAT(page.body, HasSubstr("<script src=\"/app.js\">"));
  ASSERT_FALSE(page.headers.empty());
  EXPECT_EQ(page.headers[0].first, "Content-Security-Policy");
  EXPECT_THAT(page.headers[0].second, HasSubstr("default-src 'self'"));
  EXPECT_THAT(Get("/app.js", Caller{}).body, HasSubstr("textContent"));
  EXPECT_THAT(Get("/app.js", Caller{}).body, Not(HasSubstr("innerHTML")));
}

// /api/jobs is paged as ListJobs is: page_size jobs, then a
// next_page_token that the next request gives; a bad size is a 400.
TEST_F(DashboardTest, TheJobListIsPaged) {
  v1::JobSpec spec;
  spec.set_name("more");
  std::vector<std::string> ids = {alices_, bobs_};
  for (int i = 0; i < 3; ++i) ids.push_back(*core_->SubmitJob(spec, "user:carol"));
  const Caller local{Caller::Role::kLocal, ""};
  std::vector<std::string> seen;
  std::string token;
  for (int pages = 0; pages < 10; ++pages) {
    HttpResponse r = Get("/api/jobs", local,
                         "page_size=2" + (token.empty() ? "" : "&page_token=" + token));
    ASSERT_EQ(r.status, 200) << r.body;
    v1::ListJobsResponse page;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.body, &page).ok()) << r.body;
    EXPECT_LE(page.jobs_size(), 2);
    for (const auto& j : page.jobs()) seen.push_back(j.job_id());
    token = page.next_page_token();
    if (token.empty()) break;
  }
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(Get("/api/jobs", local, "page_size=5000").status, 400);
  EXPECT_EQ(Get("/api/jobs", local, "page_size=two").status, 400);
  EXPECT_THAT(Get("/app.js", Caller{}).body, HasSubstr("next_page_token"));
}

TEST_F(DashboardTest, UsersSeeTheirOwnJobsLocalCallersEveryJob) {
  HttpResponse alice = Get("/api/jobs", User("alice"));
  EXPECT_EQ(alice.status, 200);
  EXPECT_EQ(alice.content_type, "application/json");
  EXPECT_THAT(alice.body, HasSubstr(alices_));
  EXPECT_THAT(alice.body, Not(HasSubstr(bobs_)));
  Caller local{Caller::Role::kLocal, ""};
  HttpResponse all = Get("/api/jobs", local);
  EXPECT_THAT(all.body, HasSubstr(alices_));
  EXPECT_THAT(all.body, HasSubstr(bobs_));
  EXPECT_EQ(Get("/api/jobs/" + bobs_, User("alice")).status, 403);
  EXPECT_EQ(Get("/api/jobs/" + bobs_ + "/metrics", User("alice")).status, 403);
  EXPECT_EQ(Get("/api/jobs/" + bobs_ + "/logs", User("alice")).status, 403);
  EXPECT_EQ(Get("/api/jobs/" + alices_, User("alice")).status, 200);
  EXPECT_EQ(Get("/api/jobs/" + alices_ + "/events", User("alice")).status, 200);
  const std::string events = Get("/api/jobs/" + alices_ + "/events", User("alice")).body;
  EXPECT_THAT(events, HasSubstr("job_submitted"));
  // Where the next poll starts: the newest event shown (a seq of 0 would
  // leave the field out).
  EXPECT_THAT(events, HasSubstr("\"next_after_seq\":\"1\""));
  EXPECT_THAT(events, Not(HasSubstr(bobs_)));
  // A worker's certificate, or one of no role, reads nothing.
  EXPECT_EQ(Get("/api/jobs", Caller{Caller::Role::kWorker, "node-1"}).status, 403);
  EXPECT_EQ(Get("/api/workers", Caller{}).status, 403);
  EXPECT_EQ(Get("/api/workers", User("bob")).status, 200);
}

TEST_F(DashboardTest, MalformedAndUnknownRequestsAreRefusedByName) {
  Caller local{Caller::Role::kLocal, ""};
  EXPECT_EQ(Get("/api/jobs/job-999999", local).status, 404);
  EXPECT_EQ(Get("/api/jobs/..%2F..%2Fetc", local).status, 400);
  EXPECT_EQ(Get("/api/jobs/a/b/c", local).status, 404);
  EXPECT_EQ(Get("/api/jobs/" + alices_ + "/nothing", local).status, 404);
  EXPECT_EQ(Get("/nothing", local).status, 404);
  EXPECT_EQ(Get("/api/jobs/" + alices_ + "/logs", local, "rank=x").status, 400);
  EXPECT_EQ(Get("/api/jobs/" + alices_ + "/logs", local, "rank=-3").status, 400);
  EXPECT_EQ(Get("/api/jobs/" + alices_ + "/logs", local, "rank=99999").status, 400);
  HttpResponse empty = Get("/api/jobs/" + alices_ + "/logs", local, "rank=0");
  EXPECT_EQ(empty.status, 200);  // nothing logged yet
  EXPECT_EQ(empty.body, "");
}

}  // namespace
}  // namespace frameworm::coordinator
