#include "bench/p9_tls_stream.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"

namespace frameworm::bench {
namespace {

constexpr size_t kBuf = 1 << 20;

using Ctx = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;

// A context with the directory's key pair, requiring and verifying the
// peer's certificate against its CA. Null (and a printed error) on failure.
Ctx MakeContext(const std::string& tls_dir, bool server) {
  Ctx ctx(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()), SSL_CTX_free);
  if (!ctx ||
      SSL_CTX_use_certificate_chain_file(ctx.get(), (tls_dir + "/tls.crt").c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), (tls_dir + "/tls.key").c_str(), SSL_FILETYPE_PEM) !=
          1 ||
      SSL_CTX_load_verify_locations(ctx.get(), (tls_dir + "/ca.crt").c_str(), nullptr) != 1) {
    ERR_print_errors_fp(stderr);
    return Ctx(nullptr, SSL_CTX_free);
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return ctx;
}

}  // namespace

int ListenTcp(int port, const char* who) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 1) != 0) {
    std::fprintf(stderr, "%s: bind/listen: %s\n", who, std::strerror(errno));
    ::close(s);
    return -1;
  }
  return s;
}

int ConnectTcp(const std::string& host, int port, const char* who) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  for (int i = 0; ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0; ++i) {
    if (i > 50) {
      std::fprintf(stderr, "%s: connect: %s\n", who, std::strerror(errno));
      ::close(s);
      return -1;
    }
    ::usleep(100000);
  }
  return s;
}

int TlsReceive(int port, const std::string& tls_dir) {
  Ctx ctx = MakeContext(tls_dir, true);
  if (!ctx) return 1;
  const int s = ListenTcp(port, "p9 tls receive");
  if (s < 0) return 1;
  std::printf("receiving on %d\n", port);
  std::fflush(stdout);
  const int c = ::accept(s, nullptr, nullptr);
  SSL* ssl = SSL_new(ctx.get());
  SSL_set_fd(ssl, c);
  long long total = 0;
  int rc = 1;
  if (SSL_accept(ssl) == 1) {
    std::vector<char> buf(kBuf);
    for (int n; (n = SSL_read(ssl, buf.data(), static_cast<int>(buf.size()))) > 0;) total += n;
    rc = 0;
  } else {
    ERR_print_errors_fp(stderr);
  }
  SSL_free(ssl);
  ::close(c);
  ::close(s);
  std::printf("received %lld\n", total);
  return rc;
}

int TlsSend(const std::string& host, int port, long long mib, const std::string& tls_dir) {
  Ctx ctx = MakeContext(tls_dir, false);
  if (!ctx) return 1;
  const int s = ConnectTcp(host, port, "p9 tls send");
  if (s < 0) return 1;
  int one = 1;
  ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // as gRPC does
  SSL* ssl = SSL_new(ctx.get());
  {
    // Records gathered into 1 MiB socket writes, as gRPC gathers its frames
    // (one 16 KiB record per write costs half the rate over a veth path).
    BIO* sock = BIO_new_socket(s, BIO_NOCLOSE);
    BIO* buffered = BIO_new(BIO_f_buffer());
    BIO_set_write_buffer_size(buffered, 1 << 20);
    BIO_push(buffered, sock);
    BIO_up_ref(sock);
    SSL_set_bio(ssl, sock, buffered);
  }
  if (SSL_connect(ssl) != 1) {
    ERR_print_errors_fp(stderr);
    SSL_free(ssl);
    ::close(s);
    return 1;
  }
  std::vector<char> buf(kBuf, 'x');
  const absl::Time t0 = absl::Now();
  for (long long i = 0; i < mib; ++i) {
    if (SSL_write(ssl, buf.data(), static_cast<int>(buf.size())) != static_cast<int>(buf.size())) {
      ERR_print_errors_fp(stderr);
      SSL_free(ssl);
      ::close(s);
      return 1;
    }
  }
  SSL_shutdown(ssl);  // close_notify; the receiver's SSL_read then ends
  BIO_flush(SSL_get_wbio(ssl));
  ::shutdown(s, SHUT_WR);
  char c;
  while (::read(s, &c, 1) > 0) {
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  std::printf("{\"tls_mib_s\":%.1f,\"cipher\":\"%s\"}\n", static_cast<double>(mib) / secs,
              SSL_get_cipher_name(ssl));
  SSL_free(ssl);
  ::close(s);
  return 0;
}

int DiskWrite(const std::string& dir, long long mib) {
  const std::string path = dir + "/p9-disk-probe";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror("p9 disk: open");
    return 1;
  }
  std::vector<char> buf(kBuf);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 7919);
  const absl::Time t0 = absl::Now();
  bool ok = true;
  for (long long i = 0; ok && i < mib; ++i) {
    ok = ::write(fd, buf.data(), buf.size()) == static_cast<ssize_t>(buf.size());
  }
  ok = ok && ::fsync(fd) == 0;
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  ::close(fd);
  ::unlink(path.c_str());
  if (!ok) {
    std::perror("p9 disk: write");
    return 1;
  }
  std::printf("{\"disk_mib_s\":%.1f}\n", static_cast<double>(mib) / secs);
  return 0;
}

}  // namespace frameworm::bench
