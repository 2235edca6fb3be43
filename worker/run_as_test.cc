// The refusals of worker/run_as.h; becoming the user is exercised by the
// e2e test (tests/e2e/cluster_test.cc, --user), as this process must stay
// root.
#include "worker/run_as.h"

#include <fcntl.h>
#include <sys/stat.h>
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
  absl::StatusOr<RunAsUser> numeric = LookUpUser("10001:10002");  // no passwd entry needed
  ASSERT_TRUE(numeric.ok()) << numeric.status();
  EXPECT_EQ(numeric->uid, 10001u);
  EXPECT_EQ(numeric->gid, 10002u);
  EXPECT_TRUE(numeric->numeric);
  for (const char* bad : {"10001:x", ":5", "5:", "1:2:3", "+1:2", " 1:2", "-1:2",
                          "4294967295:1", "99999999999:1"}) {
    EXPECT_EQ(LookUpUser(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  absl::StatusOr<RunAsUser> root = LookUpUser("0");
  EXPECT_EQ(root.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(root.status().message().find("jobs would run as root"), std::string::npos);
  EXPECT_EQ(LookUpUser("0:5").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<RunAsUser> root_group = LookUpUser("10001:0");
  EXPECT_EQ(root_group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(root_group.status().message().find("gid 0"), std::string::npos);
  if (::geteuid() == 0) {  // DropPrivileges refuses root too, whatever it is given
    RunAsUser as_root;
    as_root.name = "root";
    absl::Status s = DropPrivileges(as_root);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("jobs would run as root"), std::string::npos);
  }
}

// Run as root here (nothing is changed): a key this process can read is
// refused, one it cannot tell about too; a work dir of another owner is
// refused naming the chown, a missing one is left for the user to make.
TEST(RunAsTest, AReadableKeyAndAWorkDirOfAnotherOwnerAreRefused) {
  absl::StatusOr<RunAsUser> nobody = LookUpUser("nobody");
  if (!nobody.ok() || ::geteuid() != 0) GTEST_SKIP() << "needs root and a user 'nobody'";
  const std::string dir = ::testing::TempDir() + "/run-as-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const std::string key = dir + "/tls.key";
  ASSERT_EQ(::close(::open(key.c_str(), O_CREAT | O_WRONLY, 0600)), 0);
  absl::Status readable = CheckKeyUnreadable(*nobody, key);
  EXPECT_EQ(readable.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(readable.message().find("--user nobody can read " + key), std::string::npos)
      << readable;
  absl::Status unknown = CheckKeyUnreadable(*nobody, dir + "/gone.key");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unknown.message().find("cannot tell"), std::string::npos) << unknown;
  absl::Status owned = CheckWorkDirOwned(*nobody, dir);  // root's
  EXPECT_EQ(owned.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(owned.message().find("chown -R nobody: " + dir), std::string::npos) << owned;
  EXPECT_TRUE(CheckWorkDirOwned(*nobody, dir + "/new").ok());
  absl::StatusOr<RunAsUser> numeric = LookUpUser("65534:65534");
  ASSERT_TRUE(numeric.ok());
  absl::Status numeric_owned = CheckWorkDirOwned(*numeric, dir);
  EXPECT_NE(numeric_owned.message().find("chown -R 65534:65534 " + dir), std::string::npos)
      << numeric_owned;
  ASSERT_EQ(::chown(dir.c_str(), nobody->uid, nobody->gid), 0);
  EXPECT_TRUE(CheckWorkDirOwned(*nobody, dir).ok());
  ::unlink(key.c_str());
  ::rmdir(dir.c_str());
}

// Not started as root: refused, naming why (in a child that is not root).
TEST(RunAsTest, ANonRootWorkerCannotTakeAUser) {
  absl::StatusOr<RunAsUser> nobody = LookUpUser("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no user 'nobody' here";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && ::setuid(nobody->uid) != 0) ::_exit(2);
    absl::Status s = DropPrivileges(*nobody);
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
