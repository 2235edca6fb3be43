#include "proto/checked_serialization.h"

#include <cstdio>
#include <string>

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/line_budget.h"
#include "frameworm/v1/job_service.pb.h"
#include "frameworm/v1/peer_service.pb.h"
#include "frameworm/v1/trainer_service.pb.h"
#include "frameworm/v1/worker_service.pb.h"
#include "proto/wire_budget.h"

namespace frameworm {
namespace {

// One line a second at most (a burst of 5) for the whole process.
void NoteRefused(const absl::Status& why) {
  static absl::Mutex mu;
  static LineBudget* budget ABSL_GUARDED_BY(mu) = new LineBudget(1.0, 5.0);
  int64_t suppressed = 0;
  {
    absl::MutexLock lock(&mu);
    if (!budget->Take(absl::Now(), &suppressed)) return;
  }
  std::string line = absl::StrCat("frameworm: refused a received message unparsed: ", why.message());
  if (suppressed > 0) absl::StrAppend(&line, " (", suppressed, " more refused since the last line)");
  std::fprintf(stderr, "%s\n", line.c_str());
}

// The wire check of a message of `type` in `buffer` (left unread).
grpc::Status CheckedDeserialize(grpc::ByteBuffer* buffer, const google::protobuf::Descriptor& type) {
  if (buffer == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, "No payload");
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok()) return reader.status();
  absl::StatusOr<int64_t> n = CountWireElements(type, &reader, kMaxWireElements);
  if (n.ok()) return grpc::Status::OK;
  NoteRefused(n.status());
  return grpc::Status(n.status().code() == absl::StatusCode::kResourceExhausted
                          ? grpc::StatusCode::RESOURCE_EXHAUSTED
                          : grpc::StatusCode::INVALID_ARGUMENT,
                      std::string(n.status().message()));
}

}  // namespace

bool IsWireChecked(std::string_view full_name) {
#define FRAMEWORM_NAME(T) "frameworm.v1." #T,
  static constexpr std::string_view kNames[] = {FRAMEWORM_WIRE_CHECKED_TYPES(FRAMEWORM_NAME)};
#undef FRAMEWORM_NAME
  for (std::string_view n : kNames)
    if (n == full_name) return true;
  return false;
}

}  // namespace frameworm

namespace grpc {
#define FRAMEWORM_DEFINE_TRAITS(T)                                                          \
  Status SerializationTraits<::frameworm::v1::T, void>::Serialize(                         \
      const protobuf::MessageLite& msg, ByteBuffer* bb, bool* own_buffer) {                \
    return GenericSerialize<ProtoBufferWriter, ::frameworm::v1::T>(msg, bb, own_buffer);   \
  }                                                                                         \
  Status SerializationTraits<::frameworm::v1::T, void>::Deserialize(                       \
      ByteBuffer* buffer, protobuf::MessageLite* msg) {                                     \
    Status checked = ::frameworm::CheckedDeserialize(buffer, *::frameworm::v1::T::descriptor()); \
    if (!checked.ok()) {                                                                    \
      if (buffer != nullptr) buffer->Clear();                                               \
      return checked;                                                                       \
    }                                                                                       \
    return GenericDeserialize<ProtoBufferReader, ::frameworm::v1::T>(buffer, msg);          \
  }
FRAMEWORM_WIRE_CHECKED_TYPES(FRAMEWORM_DEFINE_TRAITS)
#undef FRAMEWORM_DEFINE_TRAITS
}  // namespace grpc
