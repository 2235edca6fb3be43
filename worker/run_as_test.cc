// The refusals of worker/run_as.h; becoming the user is exercised by the
// e2e test (tests/e2e/cluster_test.cc, --user), as this process must stay
// root.
#include "worker/run_as.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(RunAsTest, UnknownUsersAndRootAreRefused) {
  absl::StatusOr<RunAsUser> none = LookUpUser("no-such-user-frameworm");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no such user"), std::string::npos);
  EXPECT_EQ(LookUpUser("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LookUpUser(std::string(300, 'u')).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<RunAsUser> root = LookUpUser("0");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->uid, 0u);
  if (::geteuid() == 0) {
    absl::Status s = DropPrivileges(*root, ::testing::TempDir() + "/run-as-root");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("jobs would run as root"), std::string::npos);
  }
}

// Not started as root: refused, naming why (in a child that is not root).
TEST(RunAsTest, ANonRootWorkerCannotTakeAUser) {
  absl::StatusOr<RunAsUser> nobody = LookUpUser("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no user 'nobody' here";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && ::setuid(nobody->uid) != 0) ::_exit(2);
    absl::Status s = DropPrivileges(*nobody, "/nonexistent/run-as");
    const bool named = s.code() == absl::StatusCode::kFailedPrecondition &&
                       s.message().find("needs frameworm-worker started as root") !=
                           std::string::npos;
    ::_exit(named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace frameworm
