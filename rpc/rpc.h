// The one place where gRPC channels and servers are made, so TLS and auth
// tokens can be added here later without touching callers.
//
// Thread safety: free functions; the returned objects are gRPC's own
// (thread-safe channels; a server owned by the caller).
#ifndef FRAMEWORM_RPC_RPC_H_
#define FRAMEWORM_RPC_RPC_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace frameworm {

// A channel to `target` ("host:port"). Never fails: connection errors show
// up on the calls.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // port 0: pick a free one
  int max_message_bytes = 16 << 20;    // larger messages are refused
};

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// Builds and starts a server with the given services (not owned; they must
// outlive the server). Errors: UNAVAILABLE when the address can't be bound.
absl::StatusOr<StartedServer> StartServer(
    const ServerOptions& options, const std::vector<grpc::Service*>& services);

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_RPC_H_
