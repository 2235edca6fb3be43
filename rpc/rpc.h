// The one place where gRPC channels and servers are made: plaintext, or
// mutual TLS with the cluster's certificates (rpc/tls.h).
//
// Thread safety: free functions; the returned objects are gRPC's own
// (thread-safe channels; a server owned by the caller).
#ifndef FRAMEWORM_RPC_RPC_H_
#define FRAMEWORM_RPC_RPC_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "rpc/rpc_latency.h"
#include "rpc/tls.h"

namespace frameworm {

// A channel to `target` ("host:port"), plaintext, or with `tls` presenting
// its certificate and accepting only a server certificate of the cluster
// carrying `server_name` (the coordinator's by default; kWorkerTlsName for a
// peer worker), not `target`. Never fails: connection errors show up on the
// calls.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const TlsFiles* tls = nullptr,
                                           const char* server_name = kCoordinatorTlsName);

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // port 0: pick a free one
  int max_message_bytes = 16 << 20;    // larger messages are refused
  // Received messages larger than this are refused (RESOURCE_EXHAUSTED);
  // 0: max_message_bytes. A server whose requests are small sets it low,
  // so a call costs it no more than that in buffers.
  int max_receive_bytes = 0;
  // The memory gRPC may hold for this server's connections and calls
  // (grpc::ResourceQuota; 0: unbounded). Under pressure gRPC refuses new
  // calls (RESOURCE_EXHAUSTED) and tells connections to go away (clients
  // reconnect) instead of buffering a flood of large requests from many
  // connections: 800 connections each sending a 15 MiB request peaked the
  // coordinator at 0.32-0.48 of its RSS without a quota (bench/rpc_flood.py).
  // Not a bound on the process: a received message is copied out of gRPC's
  // buffers to be handled, and one connection's flood is paced by HTTP/2
  // flow control with or without it.
  size_t memory_quota_bytes = 256 << 20;
  // Calls one connection may have open at once (HTTP/2
  // SETTINGS_MAX_CONCURRENT_STREAMS): a well-behaved client queues the
  // rest until one ends; a stream past it is refused. So one connection
  // cannot hold an unbounded number of calls (each a reactor, its buffers
  // and a handler's state). Our clients keep a few open per connection.
  int max_streams_per_connection = 256;
  // Every server takes uncompressed messages only: a compressed request is
  // refused (UNIMPLEMENTED), as a few hundred bytes of gzip can inflate to
  // a message of max_message_bytes.
  // Mutual TLS: every client must present a certificate of tls->ca_pem.
  // Unset: plaintext.
  std::optional<TlsFiles> tls;
  // With tls: a client may also connect without a certificate (CallerOf
  // says kAnonymous; the coordinator lets such callers make trainer calls
  // only). A certificate presented is still verified.
  bool client_certificate_optional = false;
  // Times every unary call (rpc_latency.h); not owned, must outlive the
  // server. Null: none.
  RpcLatency* latency = nullptr;
};

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// Builds and starts a server with the given services (not owned; they must
// outlive the server). Errors: INVALID_ARGUMENT when options.listen is not
// HOST:PORT with a port 0..65535; UNAVAILABLE when the address can't be
// bound.
absl::StatusOr<StartedServer> StartServer(
    const ServerOptions& options, const std::vector<grpc::Service*>& services);

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_RPC_H_
