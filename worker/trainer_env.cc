#include "worker/trainer_env.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace frameworm {

const std::vector<std::string>& DefaultTrainerEnvAllowList() {
  static const auto* list = new std::vector<std::string>{
      "PATH",   "HOME",          "USER",       "LOGNAME",    "SHELL",       "LANG",
      "LANGUAGE", "TZ",          "TERM",       "TMPDIR",     "LD_LIBRARY_PATH",
      "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "FRAMEWORM_NO_SHM",
      "LC_*",   "CUDA_*",        "NCCL_*",     "GLOO_*",     "OMP_*",       "MKL_*",
      "KMP_*",  "NVIDIA_*",      "TORCH_*"};
  return *list;
}

absl::Status CheckAllowEntry(const std::string& entry) {
  std::string name = entry;
  if (!name.empty() && name.back() == '*') name.pop_back();
  bool ok = !name.empty() && name.size() <= 128 && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) {
    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '_');
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", entry, "' is not a variable name or a prefix ending in '*'"));
  }
  return absl::OkStatus();
}

namespace {

bool Allowed(const std::string& name, const std::vector<std::string>& list) {
  for (const std::string& e : list) {
    if (!e.empty() && e.back() == '*') {
      if (absl::StartsWith(name, absl::string_view(e).substr(0, e.size() - 1))) return true;
    } else if (name == e) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::map<std::string, std::string> TrainerBaseEnv(
    const std::map<std::string, std::string>& worker_env,
    const std::vector<std::string>& extra) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : worker_env) {
    if (Allowed(k, DefaultTrainerEnvAllowList()) || Allowed(k, extra)) out[k] = v;
  }
  return out;
}

}  // namespace frameworm
