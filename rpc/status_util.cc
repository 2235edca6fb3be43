#include "rpc/status_util.h"

#include "absl/strings/str_cat.h"

namespace frameworm {

absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = s.error_message();
  if (msg.empty() && s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    msg = "the server does not have this call (an older version?) or could not parse the "
          "request (too many entries or malformed; its log says which)";
  }
  if (!what.empty()) msg = absl::StrCat(what, ": ", msg);
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), msg);
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

}  // namespace frameworm
