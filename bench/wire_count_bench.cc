// What the wire count (proto/wire_budget.h) adds to receiving a message:
// for the messages the coordinator receives most (a step report, a batch
// of 16 as a trainer sends, the largest batch allowed, a heartbeat), the
// time to count its bytes against the time protobuf takes to parse them,
// both from a gRPC ByteBuffer as the server gets it. Medians of 15 rounds.
//
//   build/bin/wire_count_bench   (prints a Markdown table)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/strings/str_cat.h"
#include "frameworm/v1/trainer_service.pb.h"
#include "frameworm/v1/worker_service.pb.h"
#include "proto/checked_serialization.h"
#include "proto/wire_budget.h"

namespace {

using namespace frameworm;
using Clock = std::chrono::steady_clock;

v1::StepMetrics Report(int64_t step, int metrics, int collectives) {
  v1::StepMetrics m;
  m.mutable_ref()->set_job_id("job-000001");
  m.mutable_ref()->set_generation(1);
  m.mutable_ref()->set_token(std::string(64, 'a'));
  m.set_rank(3);
  m.set_step(step);
  m.set_samples(64);
  m.set_step_seconds(0.0123);
  for (int k = 0; k < metrics; ++k) (*m.mutable_values())[k == 0 ? "loss" : absl::StrCat("m", k)] = k;
  for (int c = 0; c < collectives; ++c) {
    v1::CollectiveOp* op = m.mutable_collectives()->add_recent();
    op->set_seq(c + 1);
    op->set_op("allreduce");
    op->set_state("completed");
  }
  return m;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Nanoseconds per call of `f`, the median of 15 rounds of `n` calls.
template <class F>
double NsPerCall(int n, F f) {
  std::vector<double> rounds;
  for (int r = 0; r < 15; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) f();
    rounds.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

template <class Msg>
void Row(const char* what, const Msg& msg, int n) {
  const std::string bytes = msg.SerializeAsString();
  grpc::ByteBuffer buf = Buffer(bytes);
  int64_t elements = 0;
  const double count_ns = NsPerCall(n, [&] {
    grpc::ProtoBufferReader reader(&buf);
    elements = *CountWireElements(*Msg::descriptor(), &reader, kMaxWireElements);
  });
  const double parse_ns = NsPerCall(n, [&] {
    grpc::ProtoBufferReader reader(&buf);
    Msg parsed;
    parsed.ParseFromZeroCopyStream(&reader);
  });
  std::printf("| %s | %zu | %lld | %.2f | %.2f | %.1f%% |\n", what, bytes.size(),
              static_cast<long long>(elements), count_ns / 1000, parse_ns / 1000,
              100 * count_ns / parse_ns);
}

}  // namespace

int main() {
  std::printf("| message | bytes | elements counted | count (us) | parse (us) | count / parse |\n");
  std::printf("|---|---|---|---|---|---|\n");
  Row("ReportStep: one report, 2 metrics", Report(100, 2, 0), 20000);
  v1::StepReports batch16;
  for (int i = 0; i < 16; ++i) *batch16.add_reports() = Report(100 + i, 2, 0);
  Row("ReportSteps: 16 reports of 2 metrics (a trainer's batch)", batch16, 5000);
  v1::StepReports largest;
  for (int i = 0; i < 256; ++i) *largest.add_reports() = Report(100 + i, 64, 16);
  Row("ReportSteps: 256 reports, 64 metrics, 16 collectives (the largest)", largest, 50);
  v1::WorkerMessage hb;
  hb.set_session_id(std::string(32, 's'));
  hb.mutable_heartbeat()->set_unix_ms(1796500000000);
  Row("Session: a heartbeat", hb, 50000);
  return 0;
}
