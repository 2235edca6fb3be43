// Test helper: runs the frameworm-train binary ($FRAMEWORM_BIN_DIR, as
// ctest sets it) or another command as a user would, capturing its exit
// code, stdout and stderr; reads numbers out of its JSON lines.
#ifndef FRAMEWORM_TRAINER_TRAIN_PROCESS_H_
#define FRAMEWORM_TRAINER_TRAIN_PROCESS_H_

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "train/test_util.h"

namespace frameworm::testutil {

struct Result {
  int code = -1;
  std::string out, err;
  std::string last_line() const {
    std::string s = out;
    while (!s.empty() && s.back() == '\n') s.pop_back();
    auto nl = s.rfind('\n');
    return nl == std::string::npos ? s : s.substr(nl + 1);
  }
  // The stdout lines that contain `needle`.
  std::vector<std::string> lines_with(const std::string& needle) const {
    std::vector<std::string> out_lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) {
      if (l.find(needle) != std::string::npos) out_lines.push_back(l);
    }
    return out_lines;
  }
};

inline std::string TrainBin() {
  const char* d = std::getenv("FRAMEWORM_BIN_DIR");
  return std::string(d ? d : ".") + "/frameworm-train";
}

// `command` through the shell (stdout captured, stderr to a file).
inline Result RunShell(const std::string& command) {
  const std::string dir = MakeTempDir("fwtrain-err");
  const std::string err = dir + "/stderr";
  Result r;
  const std::string cmd = command + " 2>" + err;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, k);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  RemoveTree(dir);
  return r;
}

// frameworm-train `args` with `env` (VAR=value ...) before it.
inline Result RunTrain(const std::string& args, const std::string& env = "") {
  return RunShell(env + " " + TrainBin() + " " + args);
}

// The number after "key": in a JSON line; -1 when absent.
inline double Field(const std::string& json, const std::string& key) {
  auto p = json.find("\"" + key + "\":");
  if (p == std::string::npos) return -1;
  return std::atof(json.c_str() + p + key.size() + 3);
}

}  // namespace frameworm::testutil

#endif  // FRAMEWORM_TRAINER_TRAIN_PROCESS_H_
