// Stacks taken from outside, of real processes (eu-stack from elfutils).
#include "worker/stack_dump.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;

TEST(StackDumpTest, RunBoundedKillsOverdueAndNamesWhatCannotRun) {
  bool timed_out = false;
  const absl::Time t0 = absl::Now();
  std::string out = RunBounded({"sh", "-c", "echo hi; exec sleep 30"}, absl::Milliseconds(300),
                               1024, &timed_out);
  EXPECT_TRUE(timed_out);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(out, "hi\n");
  out = RunBounded({"sh", "-c", "yes | head -c 100000"}, absl::Seconds(10), 10, &timed_out);
  EXPECT_FALSE(timed_out);
  EXPECT_EQ(out.size(), 10u);
  out = RunBounded({"/nonexistent/tool"}, absl::Seconds(1), 1024, &timed_out);
  EXPECT_THAT(out, HasSubstr("cannot run /nonexistent/tool"));
}

// A process tree (sh -> sleep) stopped as a hung trainer would be: every
// process's threads are listed under the block's header, the shell's
// child included.
TEST(StackDumpTest, EveryProcessOfTheTreeIsInTheBlock) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setpgid(0, 0);  // a group of its own: the test kills the whole tree
    ::execlp("sh", "sh", "-c", "sleep 60; true", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  absl::SleepFor(absl::Milliseconds(300));  // the sleep is running
  ::kill(-child, SIGSTOP);
  const std::string block = DumpStacks({"job-1", 3, 1}, child, "hang detected: rank 1 hung");
  ::kill(-child, SIGKILL);  // the sleep too (it holds the test's stdout)
  ::waitpid(child, nullptr, 0);
  EXPECT_THAT(block, HasSubstr("=== frameworm: stacks of job job-1 generation 3 rank 1 "
                               "(hang detected: rank 1 hung) at "));
  EXPECT_THAT(block, HasSubstr(absl::StrCat("--- pid ", child, ": sh -c sleep 60; true ---")));
  EXPECT_THAT(block, HasSubstr(": sleep 60 ---"));
  EXPECT_THAT(block, HasSubstr("TID "));
  EXPECT_THAT(block, HasSubstr("nanosleep")) << block;
  EXPECT_THAT(block, ::testing::EndsWith("=== frameworm: end of stacks ===\n"));
  // A task whose processes are gone.
  EXPECT_THAT(DumpStacks({"job-1", 3, 1}, child, "gone"), HasSubstr("no process of the task is left"));
}

}  // namespace
}  // namespace frameworm
