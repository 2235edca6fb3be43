// Conversions between grpc::Status and absl::Status. Canonical codes map
// one-to-one (docs/ARCHITECTURE.md, "Errors are values"); a refused
// streaming call.
//
// Thread safety: free functions, no shared state.
#ifndef FRAMEWORM_RPC_STATUS_UTIL_H_
#define FRAMEWORM_RPC_STATUS_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace frameworm {

// The gRPC code is preserved; `what` (e.g. the method name) prefixes the
// message when non-empty. gRPC's own UNIMPLEMENTED, which has no message
// (the server lacks the method, or could not parse the request: one of
// more entries than proto/checked_serialization.h allows), gets one
// saying so.
absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& what = "");
grpc::Status ToGrpcStatus(const absl::Status& s);

// A streaming call refused before it started; `Reactor` is the call's
// reactor type (grpc::ServerWriteReactor<T>, ServerReadReactor<T> or
// ServerBidiReactor<A, B>). Deletes itself when gRPC is done with it.
template <typename Reactor>
class Refused final : public Reactor {
 public:
  explicit Refused(const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_STATUS_UTIL_H_
