#include "coordinator/event_log.h"

#include <utility>

#include "google/protobuf/util/json_util.h"

namespace frameworm::coordinator {

const v1::Event& EventLog::Emit(v1::Event e) {
  e.set_seq(next_seq_++);
  e.set_unix_ms(absl::ToUnixMillis(clock_.Now()));
  pending_.push_back(std::move(e));
  return pending_.back();
}

v1::Event EventLog::Make(const std::string& kind, const std::string& job_id,
                         const std::string& message) {
  v1::Event e;
  e.set_kind(kind);
  e.set_job_id(job_id);
  e.set_message(message);
  return e;
}

std::vector<v1::Event> EventLog::TakePending() {
  std::vector<v1::Event> out;
  out.swap(pending_);
  return out;
}

void EventLog::Restore(int64_t max_seq) {
  if (max_seq >= next_seq_) next_seq_ = max_seq + 1;
}

EventRow RowOfEvent(const v1::Event& e) {
  return EventRow{e.seq(), e.job_id(), e.unix_ms(), e.SerializeAsString()};
}

std::string EventLine(const v1::Event& e) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(e, &json, opts).ok()) {
    json = "{\"seq\":" + std::to_string(e.seq()) + "}";
  }
  return "event " + json;
}

}  // namespace frameworm::coordinator
