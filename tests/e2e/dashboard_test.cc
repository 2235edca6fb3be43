// End-to-end: the coordinator's dashboard in headless Chromium (Debian's
// `chromium`) while and after a real job trains: the page loads, the job's
// loss curve has one point per aggregated step, the workers and events
// show; a screenshot is kept in the test's directory. Chromium missing is
// a failure that says how to install it, never a skip.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster.h"

namespace frameworm::e2e {
namespace {

constexpr char kChromium[] = "/usr/bin/chromium";

// Chromium's view of `url` after its scripts ran (virtual time, no waiting).
RunResult Browse(const std::vector<std::string>& what, const std::string& url) {
  std::vector<std::string> argv = {kChromium, "--headless", "--no-sandbox", "--disable-gpu",
                                   "--disable-dev-shm-usage", "--virtual-time-budget=8000",
                                   "--window-size=1200,1400"};
  argv.insert(argv.end(), what.begin(), what.end());
  argv.push_back(url);
  return RunCommand(argv, {}, absl::Seconds(90));
}

TEST(DashboardE2E, TheJobPageShowsOnePointPerStepInARealBrowser) {
  ASSERT_TRUE(std::filesystem::exists(kChromium))
      << kChromium << " is missing: install Debian's chromium (deploy/dev.sh install does)";
  ClusterOptions o;
  o.tls = false;  // plaintext on loopback: the API's own rule
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string base = (*c)->dashboard_url();
  ASSERT_FALSE(base.empty()) << (*c)->coordinator().Output();
  auto id = (*c)->Submit(R"(name: dashboard
nodes: 2
nproc_per_node: 1
backend: gloo
train:
  model: mlp
  dataset: fashion-mnist
  max_steps: 50
  batch_size: 32
)");
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = (*c)->WaitForFinal(*id, absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->state(), v1::SUCCEEDED) << st->ShortDebugString();

  RunResult list = Browse({"--dump-dom"}, base);
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("data-loaded=\"yes\""), std::string::npos) << list.output;
  EXPECT_NE(list.output.find(">" + *id + "</a>"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("SUCCEEDED"), std::string::npos);

  const std::string page = base + "#job/" + *id;
  RunResult job = Browse({"--dump-dom"}, page);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("data-points=\"50\""), std::string::npos) << job.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.output, m, std::regex("polyline id=\"loss\"[^>]* points=\"([^\"]*)\"")) ||
              std::regex_search(job.output, m, std::regex(" points=\"([^\"]*)\"[^>]*id=\"loss\"")))
      << job.output;
  std::istringstream pts(m[1].str());
  int points = 0;
  for (std::string p; pts >> p;) ++points;
  EXPECT_EQ(points, 50);
  for (const std::string& want : {std::string("job_finished"), std::string("generation_started"),
                                  std::string("\"event\":\"done\"")}) {
    EXPECT_NE(job.output.find(want), std::string::npos) << want;
  }

  const std::string png = (*c)->dir() + "/dashboard.png";
  RunResult shot = Browse({"--screenshot=" + png}, page);
  ASSERT_EQ(shot.exit_code, 0) << shot.output;
  std::ifstream f(png, std::ios::binary);
  std::string head(8, '\0');
  f.read(head.data(), 8);
  EXPECT_EQ(head, "\x89PNG\r\n\x1a\n");
  EXPECT_GT(std::filesystem::file_size(png), 10000u);
}

}  // namespace
}  // namespace frameworm::e2e
