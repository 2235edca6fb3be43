// A minimal HTTP/1.1 server for read-only endpoints (Prometheus /metrics):
// GET and HEAD only, one request per connection (Connection: close), a
// request head of at most 8 KiB, each read and write bounded by a timeout,
// at most `max_connections` served at once (more get 503 at once). The
// handler runs on the connection's own thread and must be thread-safe.
//
// Plaintext only: the owner decides where that is acceptable (loopback, or
// an address the operator opted in to by name).
//
// Thread safety: Start/port/the destructor from one thread; the handler
// from many.
#ifndef FRAMEWORM_RPC_HTTP_SERVER_H_
#define FRAMEWORM_RPC_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace frameworm {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  // Answers a GET of `path` (without the query string).
  using Handler = std::function<HttpResponse(const std::string& path)>;
  struct Options {
    std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks one
    int max_connections = 16;
    absl::Duration io_timeout = absl::Seconds(5);
  };

  // Binds and starts serving. INVALID_ARGUMENT for a bad address,
  // UNAVAILABLE when it cannot be bound (naming it).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           Handler handler);
  // Stops accepting and waits for the connections being served.
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer(int fd, int port, const Options& options, Handler handler);
  void AcceptLoop();
  void Serve(int fd);

  const int listen_fd_;
  const int port_;
  const Options options_;
  const Handler handler_;
  int wake_[2] = {-1, -1};  // a pipe: the destructor wakes the accept loop
  std::thread acceptor_;
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sends `request` (raw bytes) to HOST:PORT and returns everything the
// server sent until it closed (for tests and probes; at most 64 MiB).
// UNAVAILABLE when it cannot connect, DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<std::string> HttpExchange(const std::string& host_port, const std::string& request,
                                         absl::Duration timeout = absl::Seconds(10));
// GET `path` from HOST:PORT: the response's status and body.
// HttpExchange's errors; INTERNAL for a response that is not HTTP.
absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10));

// Splits "HOST:PORT" ("[v6]:PORT" too) for a listening socket. Exposed for
// tests. INVALID_ARGUMENT naming the address when it is not one.
absl::Status ParseListenAddress(const std::string& address, std::string* host, int* port);

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_HTTP_SERVER_H_
