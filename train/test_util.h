// Test helpers: temporary directories with POSIX calls only (libtorch.so
// exports broken copies of some std::filesystem symbols such as remove_all).
#ifndef FRAMEWORM_TRAIN_TEST_UTIL_H_
#define FRAMEWORM_TRAIN_TEST_UTIL_H_

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

}  // namespace frameworm::testutil

#endif  // FRAMEWORM_TRAIN_TEST_UTIL_H_
