// Conversions between grpc::Status and absl::Status. Canonical codes map
// one-to-one (docs/ARCHITECTURE.md, "Errors are values").
//
// Thread safety: free functions, no shared state.
#ifndef FRAMEWORM_RPC_STATUS_UTIL_H_
#define FRAMEWORM_RPC_STATUS_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace frameworm {

// The gRPC code is preserved; `what` (e.g. the method name) prefixes the
// message when non-empty.
absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& what = "");
grpc::Status ToGrpcStatus(const absl::Status& s);

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_STATUS_UTIL_H_
