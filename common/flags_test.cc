#include "common/flags.h"

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, state_dir, "./state", "where state lives");
ABSL_FLAG(int, port, 7070, "port to listen on");
ABSL_FLAG(bool, follow, false, "follow the output");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator address");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "a duration");
ABSL_FLAG(double, interval, 1, "seconds");

namespace frameworm {
namespace {

FlagsConfig Config() {
  FlagsConfig c;
  c.program = "frameworm-test";
  c.usage = "usage: frameworm-test [flags] ARGS";
  c.env_fallbacks = {{"coordinator", "FRAMEWORM_COORDINATOR"}};
  c.aliases = {{"-f", "follow"}};
  return c;
}

EnvLookup NoEnv() {
  return [](const std::string&) -> std::optional<std::string> {
    return std::nullopt;
  };
}
EnvLookup Env(std::string var, std::string value) {
  return [=](const std::string& k) -> std::optional<std::string> {
    if (k == var) return value;
    return std::nullopt;
  };
}

class FlagsTest : public ::testing::Test {
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(FlagsTest, ParsesEveryForm) {
  auto r = ParseFlags({"logs", "--state-dir=/x", "job-1", "--port", "8080",
                       "-f", "--", "--not-a-flag"},
                      Config(), NoEnv());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->positional,
            (std::vector<std::string>{"logs", "job-1", "--not-a-flag"}));
  EXPECT_EQ(absl::GetFlag(FLAGS_state_dir), "/x");
  EXPECT_EQ(absl::GetFlag(FLAGS_port), 8080);
  EXPECT_TRUE(absl::GetFlag(FLAGS_follow));
  ASSERT_TRUE(ParseFlags({"--nofollow", "--state_dir", "/y"}, Config(),
                         NoEnv()).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_follow));
  EXPECT_EQ(absl::GetFlag(FLAGS_state_dir), "/y");
}

TEST_F(FlagsTest, BadFlagsAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"--stat-dir=/x"}, "unknown flag --stat-dir (did you mean --state-dir?)"},
      {{"--zzzzzzzzzz"}, "unknown flag --zzzzzzzzzz"},
      {{"-x"}, "unknown flag -x"},
      {{"--port=abc"}, "--port: bad value 'abc': want a plain integer (no unit)"},
      {{"--port"}, "flag --port needs a value"},
      {{"--follow=maybe"}, "--follow: bad value 'maybe': want true or false"},
      // The form the flag takes is named: a unit where none belongs, none
      // where one is needed.
      {{"--interval=1s"}, "--interval: bad value '1s': want a plain number (no unit)"},
      {{"--timeout=10"}, "--timeout: bad value '10': want a duration with its unit, such as 10s"},
  };
  for (const Case& c : cases) {
    auto r = ParseFlags(c.args, Config(), NoEnv());
    ASSERT_FALSE(r.ok()) << c.args[0];
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << r.status();
  }
}

TEST_F(FlagsTest, EnvironmentFallbackYieldsToTheCommandLine) {
  ASSERT_TRUE(ParseFlags({}, Config(), Env("FRAMEWORM_COORDINATOR", "h:1")).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "h:1");
  ASSERT_TRUE(ParseFlags({"--coordinator=h:2"}, Config(),
                         Env("FRAMEWORM_COORDINATOR", "h:1")).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "h:2");
  // An empty variable counts as unset.
  absl::SetFlag(&FLAGS_coordinator, "127.0.0.1:7070");
  ASSERT_TRUE(ParseFlags({}, Config(), Env("FRAMEWORM_COORDINATOR", "")).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_coordinator), "127.0.0.1:7070");
}

TEST_F(FlagsTest, HelpAndVersionAreRequests) {
  auto h = ParseFlags({"--port=1", "--help", "--bogus"}, Config(), NoEnv());
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->help);
  auto v = ParseFlags({"--version"}, Config(), NoEnv());
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->version);
  const std::string help = FlagsHelp(Config());
  EXPECT_EQ(help.rfind("usage: frameworm-test", 0), 0u) << help;
  EXPECT_NE(help.find("--state-dir\n      where state lives (default: ./state)"),
            std::string::npos) << help;
  EXPECT_NE(help.find("(default: 127.0.0.1:7070, or $FRAMEWORM_COORDINATOR)"),
            std::string::npos) << help;
  EXPECT_NE(help.find("-f is --follow"), std::string::npos) << help;
  EXPECT_EQ(help.find("flagfile"), std::string::npos) << help;
}

TEST_F(FlagsTest, OrExitExitsTwoWithOneLine) {
  const char* argv[] = {"frameworm-test", "--prot=1", nullptr};
  EXPECT_EXIT(ParseFlagsOrExit(2, const_cast<char**>(argv), Config()),
              ::testing::ExitedWithCode(2),
              "^frameworm-test: unknown flag --prot \\(did you mean --port\\?\\) "
              "\\(see --help\\)\n$");
  const char* version[] = {"frameworm-test", "--version", nullptr};
  EXPECT_EXIT(ParseFlagsOrExit(2, const_cast<char**>(version), Config()),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace frameworm
