// Latency of a server's unary RPCs, per method, as a Prometheus histogram
// (frameworm_rpc_duration_seconds, buckets 0.5 ms to 10 s): a gRPC server
// interceptor times each call from its start to the status being sent.
// Streaming calls (watches, log follows, worker sessions) last as long as
// their peer wants and are not timed.
//
// Thread safety: thread-safe (one mutex around the counts).
#ifndef FRAMEWORM_RPC_RPC_LATENCY_H_
#define FRAMEWORM_RPC_RPC_LATENCY_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/prometheus_text.h"
#include "grpcpp/support/server_interceptor.h"

namespace frameworm {

class RpcLatency {
 public:
  static constexpr std::array<double, 14> kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

  void Observe(const std::string& method, double seconds) ABSL_LOCKS_EXCLUDED(mu_);
  // Appends the histogram family (nothing before the first call).
  void Write(PromWriter& w) const ABSL_LOCKS_EXCLUDED(mu_);
  // A factory for ServerBuilder::experimental().SetInterceptorCreators;
  // this object must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> Interceptors();

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> le{};  // cumulative at write time
    uint64_t count = 0;
    double sum = 0;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Histogram> methods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_RPC_LATENCY_H_
