// Test helpers: temporary directories with POSIX calls only (libtorch.so
// exports broken copies of some std::filesystem symbols such as remove_all),
// this test binary's path, and a bound on the address space (for tests of
// allocations that fail, run in a process of their own).
#ifndef FRAMEWORM_TRAIN_TEST_UTIL_H_
#define FRAMEWORM_TRAIN_TEST_UTIL_H_

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

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
