// libFuzzer target: the coordinator's handlers fed decoded protobuf
// messages, in sequences (program.h), on the real core (Coordinator with a
// MemoryStore and a simulated clock): what any gRPC client could send,
// after the transport. The sequence lets state build up (workers register,
// jobs start generations, ranks report with their real tokens), so the
// handlers behind those checks are reached too.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/memory_store.h"
#include "frameworm/v1/job_service.pb.h"
#include "frameworm/v1/trainer_service.pb.h"
#include "frameworm/v1/worker_service.pb.h"
#include "fuzz/program.h"
#include "google/protobuf/stubs/logging.h"

namespace frameworm::fuzz {
namespace {

// Fixed, so that seeds can name checkpoint paths inside it
// (<state>/checkpoints/<job>/ckpt-<step>.pt).
const std::string& StateDir() {
  static const std::string* dir = [] {
    auto* d = new std::string("/tmp/frameworm-fuzz-state");
    std::error_code ec;
    std::filesystem::create_directories(*d, ec);
    return d;
  }();
  return *dir;
}

// The real token of `rank` in the job's current generation (what the
// worker hands that rank), from the store.
std::string TokenOf(coordinator::MemoryStore& store, const std::string& job, int64_t gen, int rank) {
  auto rows = store.LoadAssignments(job, gen);
  if (!rows.ok()) return "";
  for (const coordinator::AssignmentRow& a : *rows) {
    v1::TaskSpec t;
    if (a.rank == rank && t.ParseFromString(a.task)) return t.token();
  }
  return "";
}

void Run(const std::vector<Call>& calls) {
  coordinator::MemoryStore store;
  SimulatedClock clock;
  coordinator::CoordinatorOptions o;
  o.stall_after = absl::ZeroDuration();  // the programs jump the clock: timeouts must fire
  o.state_dir = StateDir();
  o.advertise = "127.0.0.1:7070";
  auto created = coordinator::Coordinator::CreateWithStore(o, clock, &store);
  if (!created.ok()) std::abort();  // the harness itself is broken
  coordinator::Coordinator& c = **created;
  std::string session;
  for (const Call& call : calls) {
    const std::string& p = call.payload;
    switch (call.op) {
      case kSubmit: {
        v1::JobSpec spec;
        if (spec.ParseFromString(p)) (void)c.SubmitJob(spec);
        break;
      }
      case kRegister: {
        v1::RegisterWorkerRequest r;
        if (!r.ParseFromString(p)) break;
        auto reg = c.RegisterWorker(r);
        if (reg.ok()) {
          session = reg->session_id;
          (void)c.AttachSession(session);
        }
        break;
      }
      case kWorkerMessage: {
        v1::WorkerMessage m;
        if (!m.ParseFromString(p)) break;
        if (m.session_id().empty()) m.set_session_id(session);
        (void)c.HandleWorkerMessage(m);
        break;
      }
      case kReportStep: {
        v1::StepMetrics m;
        if (!m.ParseFromString(p)) break;
        if (m.ref().token().empty()) {
          m.mutable_ref()->set_token(
              TokenOf(store, m.ref().job_id(), m.ref().generation(), m.rank()));
        }
        (void)c.ReportStep(m);
        break;
      }
      case kReportCheckpoint: {
        v1::CheckpointRecord r;
        if (!r.ParseFromString(p)) break;
        if (r.ref().token().empty()) {
          r.mutable_ref()->set_token(TokenOf(store, r.ref().job_id(), r.ref().generation(), 0));
        }
        // Empty checksum: a well-formed one, so inputs reach the record.
        if (r.checksum().empty()) r.set_checksum("crc32:00000000");
        (void)c.ReportCheckpoint(r);
        break;
      }
      case kGetJob: {
        v1::GetJobRequest r;
        if (r.ParseFromString(p)) (void)c.GetJob(r.job_id());
        break;
      }
      case kCancelJob: {
        v1::CancelJobRequest r;
        if (r.ParseFromString(p)) (void)c.CancelJob(r.job_id());
        break;
      }
      case kLogs: {
        v1::GetLogsRequest r;
        if (r.ParseFromString(p) && c.CheckLogRequest(r.job_id(), r.rank(), r.offset()).ok()) {
          if (r.rank() == -1) {
            (void)c.logs().Ranks(r.job_id());
          } else {
            (void)c.logs().Read(r.job_id(), r.rank(), r.offset(), 1 << 16);
          }
        }
        break;
      }
      case kTick:
        clock.Advance(absl::Seconds(static_cast<double>(p.size())));
        c.Tick();
        break;
      case kRequestCheckpoint: {
        v1::RequestCheckpointRequest r;
        if (r.ParseFromString(p)) (void)c.RequestCheckpoint(r.job_id());
        break;
      }
      case kMetrics: {
        v1::GetMetricsRequest r;
        if (r.ParseFromString(p)) (void)c.GetMetrics(r.job_id(), r.since_step());
        break;
      }
      case kLists: {
        v1::ListCheckpointsRequest r;
        if (r.ParseFromString(p)) (void)c.ListCheckpoints(r.job_id());
        (void)c.ListJobs();
        (void)c.ListWorkers();
        break;
      }
      case kDetach:
        c.DetachSession(session);
        break;
      case kTakeCommands:
        (void)c.TakeCommands(session);
        break;
      default:
        break;
    }
  }
}

}  // namespace
}  // namespace frameworm::fuzz

// Malformed strings are the point here: protobuf's log line about each one
// would drown libFuzzer's output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int runs = 0;
  // Rank logs accumulate in the state directory: start it over now and then.
  if (++runs % 2000 == 0) {
    std::error_code ec;
    std::filesystem::remove_all(frameworm::fuzz::StateDir() + "/logs", ec);
  }
  frameworm::fuzz::Run(frameworm::fuzz::Decode(data, size));
  return 0;
}
