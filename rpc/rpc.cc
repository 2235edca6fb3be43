#include "rpc/rpc.h"

#include "absl/strings/str_cat.h"
#include "common/node_address.h"

namespace frameworm {

namespace {
// Channels carry at most this many bytes per message in either direction,
// matching the server default (a bigger message is refused, not truncated).
constexpr int kChannelMaxMessageBytes = 16 << 20;
// Keepalive: a client with a call open pings every kKeepaliveMs and drops
// the connection when a ping is not answered within kKeepaliveTimeoutMs, so a
// silent partition ends a worker's session in about 4 s instead of never.
constexpr int kKeepaliveMs = 2000;
constexpr int kKeepaliveTimeoutMs = 2000;
}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const TlsFiles* tls,
                                           const char* server_name) {
  grpc::ChannelArguments args;
  if (tls != nullptr) args.SetSslTargetNameOverride(server_name);
  args.SetMaxReceiveMessageSize(kChannelMaxMessageBytes);
  args.SetMaxSendMessageSize(kChannelMaxMessageBytes);
  // Reconnect quickly after a coordinator restart (gRPC's default backoff
  // grows to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  // gRPC reads this as the least time one connection attempt (TCP and the
  // TLS handshake) may take: over a busy or just-healed link a TLS
  // handshake needs more than the 200 ms that sufficed for plaintext.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Its own connections: a new channel never inherits another channel's
  // half-dead connection attempt (WorkerAgent redials with a new one).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(
      target, tls != nullptr ? ClientCredentials(*tls) : grpc::InsecureChannelCredentials(), args);
}

absl::StatusOr<StartedServer> StartServer(
    const ServerOptions& options, const std::vector<grpc::Service*>& services) {
  // gRPC would take an out-of-range port modulo 65536.
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(options.listen, &host, &port); !s.ok()) return s;
  grpc::ServerBuilder builder;
  StartedServer out;
  builder.AddListeningPort(
      options.listen,
      options.tls ? ServerCredentials(*options.tls, options.client_certificate_optional)
                  : grpc::InsecureServerCredentials(),
      &out.port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes > 0 ? options.max_receive_bytes
                                                                 : options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("frameworm-server");
    quota.Resize(options.memory_quota_bytes);
    builder.SetResourceQuota(quota);
  }
  // Uncompressed messages only: gzip would let a few hundred bytes become a
  // 16 MiB message (limits and the wire count see the inflated message).
  // A compressed request is refused (UNIMPLEMENTED, naming the algorithm).
  builder.AddChannelArgument(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET,
                             1 << GRPC_COMPRESS_NONE);
  if (options.max_streams_per_connection > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_streams_per_connection);
  }
  // A second server on a port already in use must fail, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Accept our clients' keepalive pings (every kKeepaliveMs while a call is
  // open); a peer pinging faster than every second is still cut off.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  for (grpc::Service* s : services) builder.RegisterService(s);
  if (options.latency != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> timers;
    timers.push_back(options.latency->Interceptors());
    builder.experimental().SetInterceptorCreators(std::move(timers));
  }
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    if (out.server) out.server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     " (address in use or invalid)"));
  }
  return out;
}

}  // namespace frameworm
