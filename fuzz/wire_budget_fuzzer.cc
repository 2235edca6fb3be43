// libFuzzer target: the wire count that every received message goes
// through before it is parsed (proto/wire_budget.h). The first byte picks
// one of the message types a server receives, the rest is its wire bytes.
// Properties: whatever protobuf's parser accepts, the count accepts, and it
// counts at least the message's top-level repeated entries and unknown
// fields; past a small budget it refuses as RESOURCE_EXHAUSTED; never a
// crash, a hang or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/logging.h>

#include "frameworm/v1/job_service.pb.h"
#include "frameworm/v1/peer_service.pb.h"
#include "frameworm/v1/trainer_service.pb.h"
#include "frameworm/v1/worker_service.pb.h"
#include "proto/checked_serialization.h"
#include "proto/wire_budget.h"

namespace {

using google::protobuf::Descriptor;

const std::vector<const Descriptor*>& Types() {
  static const auto* types = [] {
    auto* v = new std::vector<const Descriptor*>;
#define FRAMEWORM_TYPE(T) v->push_back(frameworm::v1::T::descriptor());
    FRAMEWORM_WIRE_CHECKED_TYPES(FRAMEWORM_TYPE)
#undef FRAMEWORM_TYPE
    return v;
  }();
  return *types;
}

absl::StatusOr<int64_t> Count(const Descriptor& type, const std::string& bytes, int64_t max) {
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()), 5);
  return frameworm::CountWireElements(type, &in, max);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static google::protobuf::LogSilencer* quiet = new google::protobuf::LogSilencer;
  (void)quiet;
  const Descriptor& type = *Types()[data[0] % Types().size()];
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  std::unique_ptr<google::protobuf::Message> msg(
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(&type)->New());
  const bool parsed = msg->ParseFromString(bytes);
  absl::StatusOr<int64_t> n = Count(type, bytes, frameworm::kMaxWireElements);
  if (!parsed) return 0;
  if (!n.ok()) std::abort();  // the parser accepted what the count refused
  int64_t top = msg->GetReflection()->GetUnknownFields(*msg).field_count();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  msg->GetReflection()->ListFields(*msg, &fields);
  for (const auto* f : fields) {
    if (f->is_repeated() && !f->is_packed()) top += msg->GetReflection()->FieldSize(*msg, f);
  }
  if (*n < top) std::abort();  // fewer counted than the parser allocated
  if (*n > 8) {
    absl::StatusOr<int64_t> small = Count(type, bytes, 8);
    if (small.status().code() != absl::StatusCode::kResourceExhausted) std::abort();
  }
  return 0;
}
