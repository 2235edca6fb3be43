#include "rpc/rpc_latency.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace frameworm {
namespace {

// One per call: the method and when the call started.
class Timer final : public grpc::experimental::Interceptor {
 public:
  Timer(RpcLatency* latency, std::string method)
      : latency_(latency), method_(std::move(method)), start_(absl::Now()) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      latency_->Observe(method_, absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  RpcLatency* const latency_;
  const std::string method_;
  const absl::Time start_;
};

class TimerFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit TimerFactory(RpcLatency* latency) : latency_(latency) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
    return new Timer(latency_, info->method() ? info->method() : "unknown");
  }

 private:
  RpcLatency* const latency_;
};

}  // namespace

void RpcLatency::Observe(const std::string& method, double seconds) {
  absl::MutexLock l(&mu_);
  Histogram& h = methods_[method];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) {
      h.le[i]++;
      break;
    }
  }
  h.count++;
  h.sum += seconds;
}

void RpcLatency::Write(PromWriter& w) const {
  absl::MutexLock l(&mu_);
  if (methods_.empty()) return;
  const std::string name = "frameworm_rpc_duration_seconds";
  w.Family(name, "histogram", "Time from the start of a unary RPC to its status, per method.");
  for (const auto& [method, h] : methods_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      cumulative += h.le[i];
      w.Sample(name + "_bucket", {{"method", method}, {"le", PromNumber(kBuckets[i])}},
               static_cast<double>(cumulative));
    }
    w.Sample(name + "_bucket", {{"method", method}, {"le", "+Inf"}}, static_cast<double>(h.count));
    w.Sample(name + "_sum", {{"method", method}}, h.sum);
    w.Sample(name + "_count", {{"method", method}}, static_cast<double>(h.count));
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcLatency::Interceptors() {
  return std::make_unique<TimerFactory>(this);
}

}  // namespace frameworm
