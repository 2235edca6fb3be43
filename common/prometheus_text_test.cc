#include "common/prometheus_text.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(PromText, FamiliesSamplesEscapingAndNumbers) {
  PromWriter w;
  w.Family("frameworm_jobs", "gauge", "Jobs by state.");
  w.Sample("frameworm_jobs", {{"state", "RUNNING"}}, 2);
  w.Family("frameworm_jobs", "gauge", "Jobs by state.");  // not repeated
  w.Sample("frameworm_jobs", {{"state", "a\"b\\c\nd"}}, 0.25);
  w.Family("up", "gauge", "Up.");
  w.Sample("up", {}, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(w.text(),
            "# HELP frameworm_jobs Jobs by state.\n"
            "# TYPE frameworm_jobs gauge\n"
            "frameworm_jobs{state=\"RUNNING\"} 2\n"
            "frameworm_jobs{state=\"a\\\"b\\\\c\\nd\"} 0.25\n"
            "# HELP up Up.\n"
            "# TYPE up gauge\n"
            "up NaN\n");
  EXPECT_EQ(PromNumber(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(PromNumber(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(PromNumber(1e20), "1e+20");
  EXPECT_EQ(std::stod(PromNumber(0.1)), 0.1);
}

}  // namespace
}  // namespace frameworm
