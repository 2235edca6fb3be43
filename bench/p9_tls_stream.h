// P9's ceilings for an encrypted copy, measured on the same hosts as the
// copy itself: a bare mutual-TLS stream (OpenSSL, each host's certificate
// directory, the library's default protocol and cipher choice), which is
// what any encrypted copy at best achieves on these cores; and the
// destination disk's write rate with a final fsync (as dd conv=fdatasync).
//
// Errors: a message on stderr and a non-zero return; nothing thrown.
// Thread safety: one call per process.
#ifndef FRAMEWORM_BENCH_P9_TLS_STREAM_H_
#define FRAMEWORM_BENCH_P9_TLS_STREAM_H_

#include <string>

namespace frameworm::bench {

// A TCP socket listening on `port` (any address), or -1 after printing why.
int ListenTcp(int port, const char* who);
// A TCP socket connected to host:port, retried for about 5 s while the
// listener starts, or -1 after printing why.
int ConnectTcp(const std::string& host, int port, const char* who);

// Accepts one TLS connection on `port` (client certificate required and
// verified against `tls_dir`/ca.crt), reads to EOF, prints "receiving on
// PORT" when listening and "received N" at the end. 0 on success.
int TlsReceive(int port, const std::string& tls_dir);

// Connects to host:port with the certificate of `tls_dir`, sends `mib` MiB
// in 1 MiB writes, waits for the receiver's close, prints
// {"tls_mib_s":X,"cipher":"NAME"}. 0 on success.
int TlsSend(const std::string& host, int port, long long mib, const std::string& tls_dir);

// Writes `mib` MiB into a new file in `dir`, fsyncs it, deletes it, prints
// {"disk_mib_s":X}. 0 on success.
int DiskWrite(const std::string& dir, long long mib);

}  // namespace frameworm::bench

#endif  // FRAMEWORM_BENCH_P9_TLS_STREAM_H_
