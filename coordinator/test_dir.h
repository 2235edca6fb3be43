// Tests only: a fresh scratch directory per test.
// Thread safety: a free function; call it from the test's thread.
#ifndef FRAMEWORM_COORDINATOR_TEST_DIR_H_
#define FRAMEWORM_COORDINATOR_TEST_DIR_H_

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

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_TEST_DIR_H_
