// Test helpers: temporary directories with POSIX calls only (libtorch.so
// exports broken copies of some std::filesystem symbols such as remove_all),
// this test binary's path, the current test run again in a child process,
// and a bound on the address space (for tests of allocations that fail,
// run in a process of their own).
#ifndef FRAMEWORM_TRAIN_TEST_UTIL_H_
#define FRAMEWORM_TRAIN_TEST_UTIL_H_

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

namespace frameworm::testutil {

inline std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + name + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

inline void RemoveTree(const std::string& dir) {
  if (dir.empty()) return;
  ::nftw(
      dir.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); },
      16, FTW_DEPTH | FTW_PHYS);
}

// /proc/self/exe resolved ("" when it cannot be read).
inline std::string SelfExe() {
  char exe[4096] = {};
  return ::readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0 ? exe : "";
}

// Runs the current test again alone, in a child process of this test
// binary, with `env` ("NAME=value ...": how the child knows it is the
// child) and an optional `wrapper` before it (e.g. "timeout 120").
struct ChildRun {
  int rc = -1;      // std::system's status
  std::string log;  // the child's stdout and stderr
};
inline ChildRun RunThisTestAgain(const std::string& env, const std::string& wrapper = "") {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = MakeTempDir("child-run");
  const std::string cmd = env + " " + wrapper + " " + SelfExe() + " --gtest_filter=" +
                          info->test_suite_name() + "." + info->name() + " > " + dir +
                          "/log 2>&1";
  ChildRun r;
  r.rc = std::system(cmd.c_str());
  std::ifstream f(dir + "/log", std::ios::binary);
  r.log.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  RemoveTree(dir);
  return r;
}

// Limits this process's address space to what it maps now plus `spare_kb`
// (run in a fresh process: no freed memory at hand). False when it cannot.
inline bool LimitAddressSpace(long spare_kb) {
  std::ifstream status("/proc/self/status");
  std::string line;
  long vm_kb = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) vm_kb = std::atol(line.c_str() + 7);
  }
  if (vm_kb <= 0) return false;
  rlimit r{};
  r.rlim_cur = r.rlim_max = static_cast<rlim_t>(vm_kb + spare_kb) * 1024;
  return ::setrlimit(RLIMIT_AS, &r) == 0;
}

}  // namespace frameworm::testutil

#endif  // FRAMEWORM_TRAIN_TEST_UTIL_H_
