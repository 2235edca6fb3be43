// grpc::SerializationTraits for every message type a Frameworm server
// receives: the requests of the job, worker, trainer and peer services,
// client-streamed messages included. Before protobuf parses one, its wire
// bytes are counted (proto/wire_budget.h); a message of more than
// kMaxWireElements elements (repeated entries, submessages and unknown
// fields) or a malformed one is refused unparsed, so a hostile message
// costs the receiver at most about 16 MB of parsed objects (an element
// parses to 100-400 bytes) instead of up to 2 GB. The largest legitimate
// request (256 step reports of 64 metrics and 16 collective records each)
// has about 21,000.
//
// What a refused sender sees is gRPC's answer to a request it could not
// deserialize: a unary or server-streaming call ends UNIMPLEMENTED, a
// client or bidirectional stream ends when that message is read. The
// receiver writes why to stderr (at most one line a second, with a count
// of those left out).
//
// Included into every generated *.grpc.pb.h (grpc_cpp_plugin's
// additional_header_includes, proto/CMakeLists.txt), so that every
// translation unit that uses these types in gRPC sees the specializations;
// they are defined once, in checked_serialization.cc. Types a server only
// sends keep gRPC's own traits. Serialization is gRPC's.
#ifndef FRAMEWORM_PROTO_CHECKED_SERIALIZATION_H_
#define FRAMEWORM_PROTO_CHECKED_SERIALIZATION_H_

#include <cstdint>
#include <string_view>

#include <grpcpp/impl/codegen/proto_utils.h>

// X(Type) for each message type that a server of frameworm.v1 receives.
#define FRAMEWORM_WIRE_CHECKED_TYPES(X)                                                      \
  X(SubmitJobRequest) X(GetJobRequest) X(ListJobsRequest) X(CancelJobRequest)                \
  X(WatchJobRequest) X(RequestCheckpointRequest) X(ListCheckpointsRequest)                  \
  X(GetCheckpointRequest) X(DebugJobRequest) X(GetMetricsRequest) X(ListWorkersRequest)     \
  X(GetLogsRequest) X(ListEventsRequest) X(RegisterWorkerRequest) X(WorkerMessage)          \
  X(StepMetrics) X(StepReports) X(CheckpointRecord) X(CheckpointChunk)                      \
  X(DownloadCheckpointRequest) X(BadCheckpoint) X(FetchCheckpointRequest)

namespace frameworm {

// The most elements a received message may hold.
inline constexpr int64_t kMaxWireElements = 65536;

// Whether messages of the frameworm.v1 type `full_name` are counted before
// they are parsed (for the test that every RPC's input type is).
bool IsWireChecked(std::string_view full_name);

namespace v1 {
#define FRAMEWORM_DECLARE_TYPE(T) class T;
FRAMEWORM_WIRE_CHECKED_TYPES(FRAMEWORM_DECLARE_TYPE)
#undef FRAMEWORM_DECLARE_TYPE
}  // namespace v1
}  // namespace frameworm

namespace grpc {
#define FRAMEWORM_DECLARE_TRAITS(T)                                                       \
  template <>                                                                             \
  class SerializationTraits<::frameworm::v1::T, void> {                                  \
   public:                                                                                \
    static Status Serialize(const protobuf::MessageLite& msg, ByteBuffer* bb,            \
                            bool* own_buffer);                                            \
    static Status Deserialize(ByteBuffer* buffer, protobuf::MessageLite* msg);            \
  };
FRAMEWORM_WIRE_CHECKED_TYPES(FRAMEWORM_DECLARE_TRAITS)
#undef FRAMEWORM_DECLARE_TRAITS
}  // namespace grpc

#endif  // FRAMEWORM_PROTO_CHECKED_SERIALIZATION_H_
