// gRPC glue of the coordinator: JobService, WorkerService and
// TrainerService on the callback API. The services only translate protos to
// Coordinator calls and statuses one-to-one (rpc/status_util.h).
//
// Streams:
//  - WorkerService.Session (bidi): the worker's first message carries the
//    session_id from RegisterWorker and attaches the session; every message
//    (heartbeat, task status, log chunk) refreshes the worker's liveness.
//    Commands (StartTask, KillTask) queued by the core are written in order
//    as they arrive. An unknown or replaced session ends the stream with
//    NOT_FOUND: the worker must RegisterWorker again, then reopen Session.
//  - JobService.WatchJob: the current JobStatus, then one on every change
//    (coalesced), ending OK after the final state is written.
//  - JobService.GetLogs: <state-dir>/logs/<job>/rank-<r>.log from `offset`
//    (rank -1: every rank's file); with `follow`, new data is streamed until
//    the job ends.
// Every stream writes through one WritePump (write_pump.h). Reactors never
// block: commands reach a session's reactor through the
// Coordinator::Listener notification and StartWrite; log files are read
// through the core's JobLogs.
//
// Thread safety: thread-safe. The CoordinatorService registers itself as the
// core's listener and unregisters in its destructor; shut the grpc::Server
// down (which ends every stream) before destroying it.
#ifndef FRAMEWORM_COORDINATOR_SERVICE_H_
#define FRAMEWORM_COORDINATOR_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "grpcpp/grpcpp.h"

namespace frameworm::coordinator {

class CoordinatorService final : public Coordinator::Listener {
 public:
  // `core` is not owned and must outlive this object. A checkpoint stream
  // that moves no chunk for `stream_idle` is cancelled: an upload that
  // receives none (the client sees CANCELLED, no file is left, its slot is
  // free again) and a download (DownloadCheckpoint, GetCheckpoint) whose
  // client takes none (the buffer and the file are released).
  explicit CoordinatorService(Coordinator* core, absl::Duration stream_idle = absl::Seconds(60));
  ~CoordinatorService() override;
  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;

  // The three services, to register with a server (rpc/rpc.h StartServer).
  std::vector<grpc::Service*> services();

  // Coordinator::Listener.
  void SessionHasCommands(const std::string& session_id) override;
  void JobChanged(const std::string& job_id) override;

  struct Impl;      // shared by the reactors (service.cc)
  struct Services;  // the generated-service implementations (service.cc)

 private:
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Services> services_;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_SERVICE_H_
