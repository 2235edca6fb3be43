// A minimal HTTP/1.1 server for read-only endpoints (Prometheus /metrics,
// the coordinator's dashboard):
// GET and HEAD only, one request per connection (Connection: close), a
// request head of at most 8 KiB, the TLS handshake and the request head
// within io_timeout of the accept and the response within io_timeout of
// being ready (deadlines, not per-read timeouts: a peer that trickles
// bytes is cut off),
// at most `max_connections` served at once, and at most
// `max_connections_per_peer` of them from one peer address (more get 503 at
// once, or a close under TLS: a client without a certificate that opens
// connections and sends nothing holds its share until io_timeout, not
// every slot). The handler runs on the connection's own thread and must be
// thread-safe.
//
// Plaintext, or HTTPS with mutual TLS (Options.tls: the cluster's
// certificates, rpc/tls.h): every client must present a certificate of the
// cluster CA, and the handler gets its role and name as the request's
// Caller, the way gRPC calls get theirs (CallerOf); on plaintext the Caller
// is kLocal. The owner decides where plaintext is acceptable (loopback, or
// an address the operator opted in to by name). Plaintext on a loopback
// address answers only requests whose Host header (when sent) is a
// loopback host: localhost, 127.0.0.0/8 or [::1], with any port; others
// get 403 (DNS rebinding: a browser would send the attacker's name).
//
// Thread safety: Start/port/the destructor from one thread; the handler
// from many.
#ifndef FRAMEWORM_RPC_HTTP_SERVER_H_
#define FRAMEWORM_RPC_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/caller.h"
#include "rpc/tls.h"

namespace frameworm {

struct HttpRequest {
  std::string path;   // "/api/jobs" (no query)
  std::string query;  // "rank=0&tail=4096" (no '?'); empty: none
  Caller caller;      // kLocal on plaintext; the certificate's on TLS
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // More header lines, e.g. {"Content-Security-Policy", "..."}.
  std::vector<std::pair<std::string, std::string>> headers;
};

class HttpServer {
 public:
  // Answers a GET.
  using Handler = std::function<HttpResponse(const HttpRequest& request)>;
  struct Options {
    std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks one
    int max_connections = 16;
    int max_connections_per_peer = 4;
    absl::Duration io_timeout = absl::Seconds(5);
    std::optional<TlsFiles> tls;  // set: HTTPS, client certificates required
  };

  // Binds and starts serving. INVALID_ARGUMENT for a bad address or TLS
  // material OpenSSL refuses, UNAVAILABLE when it cannot be bound (naming
  // it).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           Handler handler);
  // Stops accepting and waits for the connections being served.
  ~HttpServer();
  int port() const { return port_; }

  // A connection's byte stream (http_server.cc), shared with HttpExchange.
  class Conn;

 private:
  HttpServer(int fd, int port, const Options& options, Handler handler);
  void AcceptLoop();
  void Serve(int fd);
  void Serve(Conn& conn, const Caller& caller);

  const int listen_fd_;
  const int port_;
  const Options options_;
  const Handler handler_;
  int wake_[2] = {-1, -1};  // a pipe: the destructor wakes the accept loop
  std::thread acceptor_;
  void* ssl_ctx_ = nullptr;  // SSL_CTX* with options.tls
  // Plaintext on a loopback address: a request whose Host header names
  // anything but a loopback host is refused (403), so a web page that
  // rebinds its own name to 127.0.0.1 cannot read what is served.
  bool loopback_guard_ = false;
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> active_per_peer_ ABSL_GUARDED_BY(mu_);  // no zero entries
};

// Sends `request` (raw bytes) to HOST:PORT and returns everything the
// server sent until it closed (for tests and probes; at most 64 MiB).
// UNAVAILABLE when it cannot connect, DEADLINE_EXCEEDED after `timeout`.
// With `tls`: HTTPS presenting its certificate, accepting only a server
// certificate of its CA named `server_name`.
absl::StatusOr<std::string> HttpExchange(const std::string& host_port, const std::string& request,
                                         absl::Duration timeout = absl::Seconds(10),
                                         const TlsFiles* tls = nullptr,
                                         const char* server_name = kCoordinatorTlsName);
// GET `path` from HOST:PORT: the response's status and body.
// HttpExchange's errors; INTERNAL for a response that is not HTTP.
absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10),
                                     const TlsFiles* tls = nullptr);

// A daemon's --metrics-listen value: "none", or HOST:PORT on loopback
// (off loopback only when `insecure`, the operator's --metrics-insecure).
// INVALID_ARGUMENT naming the flag and what to do otherwise.
absl::Status CheckMetricsListen(const std::string& address, bool insecure);

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_HTTP_SERVER_H_
