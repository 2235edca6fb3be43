// Tests only: a fresh scratch directory per test, and a way to run code
// with no file descriptor to spare.
// Thread safety: a free function; call it from the test's thread.
#ifndef FRAMEWORM_COORDINATOR_TEST_DIR_H_
#define FRAMEWORM_COORDINATOR_TEST_DIR_H_

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace frameworm::coordinator {

// <tmp>/fw-<prefix>-<current test's name, '/' as '_'>-<pid>, removed if it
// exists (not created). The caller removes it when done.
inline std::string FreshTestDir(const std::string& prefix) {
  std::string test =
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(test.begin(), test.end(), '/', '_');  // parameterized tests
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("fw-" + prefix + "-" + test + "-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  return dir;
}

// Runs `fn` with RLIMIT_NOFILE at this process's lowest free descriptor,
// so that no open() succeeds meanwhile (EMFILE); the limit is restored
// after. A failure to set it is a test failure.
template <typename Fn>
void WithoutFreeDescriptors(Fn fn) {
  const int lowest_free = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  struct rlimit was {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
  struct Restore {
    rlimit limit;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{was};
  struct rlimit tight = was;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  fn();
}

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_TEST_DIR_H_
