// The command lines of frameworm-coordinator and frameworm-cli, run as a
// user runs them (binaries from $FRAMEWORM_BIN_DIR): --help, --version, a
// bad flag and bad values, each exit code and each one-line error.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/process.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Bin(const std::string& name) {
  const char* d = std::getenv("FRAMEWORM_BIN_DIR");
  return absl::StrCat(d ? d : ".", "/", name);
}

e2e::RunResult RunTool(const std::string& binary, std::vector<std::string> args,
                   const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), Bin(binary));
  return e2e::RunCommand(args, env, absl::Seconds(10));
}

int Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// The coordinator must not start whatever a test gets wrong: scratch state,
// any free port.
class CoordinatorFlagsTest : public ::testing::Test {
 protected:
  e2e::RunResult Coordinator(std::vector<std::string> args) {
    // First, so that the test's own flags win.
    args.insert(args.begin(), {absl::StrCat("--state-dir=", dir_, "/state"),
                               "--listen=127.0.0.1:0"});
    return RunTool("frameworm-coordinator", args);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_ = e2e::MakeTempDir("coordinator-flags");
};

TEST_F(CoordinatorFlagsTest, HelpListsFlagsWithDefaults) {
  e2e::RunResult r = RunTool("frameworm-coordinator", {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, StartsWith("usage: frameworm-coordinator [flags]\n"));
  EXPECT_THAT(r.output,
              HasSubstr("  --state-dir\n      durable state, logs, default "
                        "checkpoints (default: ./frameworm-state)\n"));
  for (const char* f :
       {"--listen", "--advertise", "--port-range", "--heartbeat-timeout",
        "--straggler-factor"})
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("  ", f, "\n"))) << f;
  EXPECT_THAT(r.output, HasSubstr("(default: 29500-29999)"));
  EXPECT_THAT(r.output, HasSubstr("(default: 10s)"));
  EXPECT_THAT(r.output, HasSubstr("(default: 1.5)"));
}

TEST_F(CoordinatorFlagsTest, VersionIsOneLine) {
  e2e::RunResult r = RunTool("frameworm-coordinator", {"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, absl::StrCat("frameworm-coordinator ", Version(), "\n"));
}

TEST_F(CoordinatorFlagsTest, BadFlagsAndValuesExitTwoWithOneLine) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"--bogus"}, "frameworm-coordinator: unknown flag --bogus"},
      {{"--stat-dir=/x"}, "unknown flag --stat-dir (did you mean --state-dir?)"},
      {{"--port-range=5-1"},
       "--port-range must be LO-HI within 1-65535 with LO <= HI, got '5-1'"},
      {{"--port-range=0-10"}, "--port-range must be"},
      {{"--port-range=29500"}, "--port-range must be"},
      {{"--heartbeat-timeout=0s"},
       "--heartbeat-timeout must be a duration of at least 2s like 10s (workers heartbeat every "
       "second), got '0'"},
      {{"--heartbeat-timeout=1500ms"},
       "--heartbeat-timeout must be a duration of at least 2s like 10s (workers heartbeat every "
       "second), got '1.5s'"},
      {{"--heartbeat-timeout=soon"}, "--heartbeat-timeout: bad value 'soon'"},
      {{"--straggler-factor=1"}, "--straggler-factor must be a number > 1"},
      {{"--straggler-window=0"}, "--straggler-window must be a number of steps >= 1, got '0'"},
      {{"--retain-finished=-1h"}, "--retain-finished must be a duration >= 0 like 168h, got '-1h'"},
      {{"--metric-history=1"}, "--metric-history must be 0 or a count >= 2, got '1'"},
      {{"--max-log-bytes=4096"}, "--max-log-bytes must be 0 or at least 1048576, got '4096'"},
      {{"--rpc-memory-quota=4096"},
       "--rpc-memory-quota must be 0 or at least 16777216 (one largest message), got '4096'"},
      {{"--rpc-memory-quota=-1"}, "--rpc-memory-quota must be 0 or at least 16777216"},
      {{"--max-queued-jobs=-1"}, "--max-queued-jobs must be a count >= 0, got '-1'"},
      {{"--max-ended-jobs=-1"}, "--max-ended-jobs must be a count >= 0, got '-1'"},
      {{"--listen=7070"}, "--listen must be HOST:PORT with a port 0..65535, got '7070'"},
      {{"--metrics-listen=7071"}, "--metrics-listen must be HOST:PORT or none, got '7071'"},
      {{"--metrics-listen=0.0.0.0:7071"},
       "--metrics-listen=0.0.0.0:7071 is off loopback: the metrics endpoint is plaintext"},
      {{"serve"}, "unexpected argument 'serve'"},
  };
  for (const Case& c : cases) {
    e2e::RunResult r = Coordinator(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.expect)) << c.args[0];
    EXPECT_THAT(r.output, StartsWith("frameworm-coordinator: ")) << c.args[0];
    EXPECT_THAT(r.output, ::testing::EndsWith(" (see --help)\n")) << c.args[0];
    EXPECT_EQ(Lines(r.output), 1) << r.output;
  }
  // A flag given as "--name value" and a later flag both count.
  e2e::RunResult r = Coordinator({"--port-range", "9-8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("got '9-8'"));
}

TEST(CliFlagsTest, HelpVersionAndBadFlag) {
  e2e::RunResult r = RunTool("frameworm-cli", {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, StartsWith("usage: frameworm-cli"));
  EXPECT_THAT(r.output, HasSubstr("or $FRAMEWORM_COORDINATOR)"));
  r = RunTool("frameworm-cli", {"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, absl::StrCat("frameworm-cli ", Version(), "\n"));
  r = RunTool("frameworm-cli", {"--bogus", "list"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "frameworm-cli: unknown flag --bogus (see --help)\n");
}

TEST(CliFlagsTest, CoordinatorComesFromTheEnvironment) {
  // Nothing listens on port 1: the failure names the address it tried.
  e2e::RunResult r = RunTool("frameworm-cli", {"list"},
                         {{"FRAMEWORM_COORDINATOR", "127.0.0.1:1"}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, StartsWith("frameworm-cli: list: UNAVAILABLE: "));
  EXPECT_THAT(r.output, HasSubstr("127.0.0.1:1")) << r.output;
}

TEST_F(CoordinatorFlagsTest, PlaintextOffLoopbackNeedsInsecureByName) {
  e2e::RunResult r = Coordinator({"--listen=0.0.0.0:0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.output), 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--listen=0.0.0.0:0 is off loopback"));
  EXPECT_THAT(r.output, HasSubstr("--insecure"));
}

TEST(WorkerFlagsTest, PlaintextToARemoteCoordinatorNeedsInsecureByName) {
  e2e::RunResult r = RunTool("frameworm-worker", {"--coordinator=192.0.2.1:7070"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--coordinator=192.0.2.1:7070 is off loopback"));
}

TEST(WorkerFlagsTest, ServingCheckpointCopiesInPlaintextOffLoopbackNeedsInsecureByName) {
  e2e::RunResult r = RunTool("frameworm-worker", {"--coordinator=127.0.0.1:1",
                                                  "--advertise=192.0.2.7"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.output), 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--peer-listen=192.0.2.7:0 is off loopback")) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--peer-listen=none")) << r.output;
  // An address this host does not have cannot be served on.
  r = RunTool("frameworm-worker",
              {"--coordinator=127.0.0.1:1", "--peer-listen=192.0.2.7:0", "--insecure"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--peer-listen: cannot listen on 192.0.2.7:0")) << r.output;
}

TEST(WorkerFlagsTest, ALogCapUnderOneMebibyteIsAFlagError) {
  e2e::RunResult r = RunTool("frameworm-worker", {"--max-log-bytes=1000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--max-log-bytes must be 0 or at least 1048576, got '1000'"));
}

// --user: an unknown user, a bad UID:GID, and a UID:GID without a work dir
// are flag errors, before anything is read or changed.
TEST(WorkerFlagsTest, AUserThatCannotBeRunAsIsAFlagError) {
  e2e::RunResult r = RunTool("frameworm-worker", {"--user=no-such-user-frameworm"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--user no-such-user-frameworm: no such user"));
  r = RunTool("frameworm-worker", {"--user=10001:x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("not a name, a uid, or UID:GID"));
  r = RunTool("frameworm-worker", {"--user=10001:10001"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--user 10001:10001 (UID:GID) needs --work-dir"));
}

// What the coordinator would refuse at every registration is refused at
// start, in one line, instead of a worker retrying forever.
TEST(WorkerFlagsTest, ARegistrationTheCoordinatorWouldRefuseIsAFlagError) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--slots=4097"}, "--slots must be between 0 and 4096, got 4097"},
      {{"--slots=-1"}, "--slots must be between 0 and 4096, got -1"},
      {{"--name=bad/name"}, "--name 'bad/name' is not 1 to 64 characters of A-Z a-z 0-9 . _ -"},
      {{std::string("--name=") + std::string(65, 'a')}, "is not 1 to 64 characters"},
      {{"--heartbeat-interval=0.001"},
       "--heartbeat-interval must be a number of seconds from 0.05 to 60"},
      {{"--heartbeat-interval=1e12"},
       "--heartbeat-interval must be a number of seconds from 0.05 to 60"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"--coordinator=127.0.0.1:1", "--peer-listen=none"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    e2e::RunResult r = RunTool("frameworm-worker", args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.output;
    EXPECT_EQ(Lines(r.output), 1) << c.args[0] << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << r.output;
  }
}

// A port past 65535 is refused by name: gRPC would take 127.0.0.1:99999 as
// port 34463 (99999 - 65536), serving or dialing somewhere else in silence.
TEST_F(CoordinatorFlagsTest, PortsOutOfRangeAreRefusedNotWrapped) {
  e2e::RunResult r = Coordinator({"--listen=127.0.0.1:99999"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--listen must be HOST:PORT with a port 0..65535, got "
                                  "'127.0.0.1:99999'"));
  r = Coordinator({"--advertise=10.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--advertise must be HOST:PORT with a port 1..65535"));
  r = RunTool("frameworm-worker", {"--coordinator=127.0.0.1:99999"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--coordinator must be HOST:PORT with a port 1..65535, got "
                                  "'127.0.0.1:99999'"));
  r = RunTool("frameworm-worker", {"--coordinator=127.0.0.1:1", "--peer-listen=127.0.0.1:70000"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("'127.0.0.1:70000' is not HOST:PORT (the port must be 0..65535)"));
  r = RunTool("frameworm-cli", {"--coordinator=127.0.0.1:99999", "list"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--coordinator needs HOST:PORT with a port 1..65535"));
}

TEST(WorkerFlagsTest, AdvertiseThatCannotBeDerivedIsAFlagError) {
  e2e::RunResult r = RunTool("frameworm-worker", {"--coordinator=nohost", "--insecure"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.output), 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--coordinator must be HOST:PORT with a port 1..65535, got "
                                  "'nohost'"))
      << r.output;
  r = RunTool("frameworm-worker", {"--coordinator=no-such-host.invalid:7070", "--insecure"});
  EXPECT_EQ(Lines(r.output), 2) << r.output;  // the --insecure warning, the error
  EXPECT_THAT(r.output, HasSubstr("WARNING: --insecure")) << r.output;
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no-such-host.invalid")) << r.output;
}

// The cluster CA from the command line, and TLS directories the daemons
// refuse (the positive path: the multi-host suite runs under TLS).
TEST_F(CoordinatorFlagsTest, AdminCaIssuesCertificatesThatDaemonsCheck) {
  const std::string ca = dir_ + "/ca";
  e2e::RunResult r = RunTool("frameworm-cli", {"admin", "ca", "init", "--ca-dir", ca});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cluster CA created in " + ca));
  r = RunTool("frameworm-cli", {"admin", "ca", "init", "--ca-dir", ca});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("ALREADY_EXISTS"));
  for (const char* who : {"user:alice", "worker:w1", "coordinator:main"}) {
    const std::string s(who);
    const std::string role = s.substr(0, s.find(':')), name = s.substr(s.find(':') + 1);
    r = RunTool("frameworm-cli", {"admin", "ca", "issue", "--ca-dir", ca, "--role", role,
                                  "--name", name, "--out", dir_ + "/" + name});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--tls-dir " + dir_ + "/" + name));
  }
  // Usage errors.
  r = RunTool("frameworm-cli", {"admin", "ca", "issue", "--ca-dir", ca, "--name", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("needs --role and --name"));
  r = RunTool("frameworm-cli", {"admin", "ca", "frob", "--ca-dir", ca});
  EXPECT_EQ(r.exit_code, 2);
  r = RunTool("frameworm-cli", {"admin", "ca", "issue", "--ca-dir", ca, "--role", "root",
                                "--name", "x", "--out", dir_ + "/x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("role must be"));
  r = RunTool("frameworm-cli", {"list", "--ca-dir", ca});
  EXPECT_EQ(r.exit_code, 2);
  r = RunTool("frameworm-cli", {"list", "--tls-dir", dir_ + "/nowhere"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--tls-dir: cannot read " + dir_ + "/nowhere/ca.crt"));
  // admin ca dials nobody: a $FRAMEWORM_TLS_DIR that does not load (an
  // expired user certificate) does not keep it from issuing a new one.
  r = RunTool("frameworm-cli",
              {"admin", "ca", "issue", "--ca-dir", ca, "--role", "user", "--name", "bob", "--out",
               dir_ + "/bob"},
              {{"FRAMEWORM_TLS_DIR", dir_ + "/nowhere"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The coordinator takes --tls-dir from $FRAMEWORM_TLS_DIR too (README):
  // a user's directory there is refused as it is on the command line.
  r = RunTool("frameworm-coordinator",
              {absl::StrCat("--state-dir=", dir_, "/state"), "--listen=0.0.0.0:0"},
              {{"FRAMEWORM_TLS_DIR", dir_ + "/alice"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not a coordinator certificate"));
  // Daemons take only their own role's certificate.
  r = Coordinator({"--listen=0.0.0.0:0", "--tls-dir=" + dir_ + "/alice"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("not a coordinator certificate"));
  r = RunTool("frameworm-worker", {"--coordinator=192.0.2.1:7070", "--tls-dir=" + dir_ + "/alice"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("user alice's certificate, not a worker's"));
  r = RunTool("frameworm-worker",
              {"--coordinator=192.0.2.1:7070", "--tls-dir=" + dir_ + "/w1", "--name=w2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--name=w2 but the --tls-dir certificate is worker:w1"));
  // A key others can read is refused.
  std::filesystem::permissions(dir_ + "/w1/tls.key", std::filesystem::perms::owner_read |
                                                        std::filesystem::perms::group_read);
  r = RunTool("frameworm-worker", {"--coordinator=192.0.2.1:7070", "--tls-dir=" + dir_ + "/w1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("chmod 600"));
}

}  // namespace
}  // namespace frameworm
