#include "common/caller.h"

#include "absl/strings/str_cat.h"

namespace frameworm {
namespace {

const char* RoleName(Caller::Role r) {
  switch (r) {
    case Caller::Role::kAdmin: return "admin";
    case Caller::Role::kUser: return "user";
    case Caller::Role::kWorker: return "worker";
    case Caller::Role::kCoordinator: return "coordinator";
    case Caller::Role::kLocal: return "local";
    case Caller::Role::kAnonymous: return "anonymous";
    case Caller::Role::kNone: break;
  }
  return "unknown";
}

}  // namespace

std::string Caller::Owner() const {
  if (role == Role::kLocal) return "local";
  return absl::StrCat(RoleName(role), ":", name);
}

std::string Caller::Describe() const {
  if (role == Role::kLocal) return "a plaintext caller";
  if (role == Role::kNone) return "a caller with an unknown certificate";
  if (role == Role::kAnonymous) return "a caller without a certificate";
  return absl::StrCat(RoleName(role), " ", name);
}

Caller Caller::FromCommonName(const std::string& cn) {
  Caller c;
  const size_t colon = cn.find(':');
  if (colon == std::string::npos || colon + 1 >= cn.size()) return c;
  const std::string role = cn.substr(0, colon);
  c.name = cn.substr(colon + 1);
  if (role == "admin") c.role = Role::kAdmin;
  else if (role == "user") c.role = Role::kUser;
  else if (role == "worker") c.role = Role::kWorker;
  else if (role == "coordinator") c.role = Role::kCoordinator;
  else c.name.clear();
  return c;
}

}  // namespace frameworm
