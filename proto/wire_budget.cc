#include "proto/wire_budget.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace frameworm {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormat;
using google::protobuf::internal::WireFormatLite;

constexpr int kMaxDepth = 100;  // protobuf's default recursion limit

class Counter {
 public:
  Counter(CodedInputStream* in, const Descriptor& top, int64_t max)
      : in_(in), top_(top), max_(max) {}

  absl::Status Message(const Descriptor* type, int depth, int end_group) {
    if (depth > kMaxDepth) return Malformed("nested more than 100 deep");
    for (;;) {
      const uint32_t tag = in_->ReadTag();
      if (tag == 0) {
        // The end of the input (or of a length-delimited submessage), unless
        // a group is open or the bytes are bad.
        if (!in_->ConsumedEntireMessage()) return Malformed("a bad tag");
        if (end_group != 0) return Malformed("a group is not closed");
        return absl::OkStatus();
      }
      const int number = WireFormatLite::GetTagFieldNumber(tag);
      const WireFormatLite::WireType wire = WireFormatLite::GetTagWireType(tag);
      if (number == 0) return Malformed("field number 0");
      if (wire == WireFormatLite::WIRETYPE_END_GROUP) {
        if (number != end_group) return Malformed("a group ends that was not opened");
        return absl::OkStatus();
      }
      const FieldDescriptor* f = type == nullptr ? nullptr : type->FindFieldByNumber(number);
      if (f != nullptr && wire != WireFormat::WireTypeForFieldType(f->type()) &&
          !(f->is_packable() && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
        f = nullptr;  // protobuf keeps a known field of another wire type as unknown
      }
      if (f == nullptr || f->is_repeated() || f->type() == FieldDescriptor::TYPE_MESSAGE) {
        if (++count_ > max_) {
          return absl::ResourceExhaustedError(absl::StrCat(
              top_.full_name(), " message of more than ", max_,
              " repeated entries, submessages and unknown fields (the most a message may hold)"));
        }
      }
      if (absl::Status s = Skip(f, number, wire, depth); !s.ok()) return s;
    }
  }

  int64_t count() const { return count_; }

 private:
  absl::Status Skip(const FieldDescriptor* f, int number, WireFormatLite::WireType wire,
                    int depth) {
    switch (wire) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t v;
        if (!in_->ReadVarint64(&v)) return Malformed("a truncated varint");
        return absl::OkStatus();
      }
      case WireFormatLite::WIRETYPE_FIXED64: {
        uint64_t v;
        if (!in_->ReadLittleEndian64(&v)) return Malformed("a truncated fixed64");
        return absl::OkStatus();
      }
      case WireFormatLite::WIRETYPE_FIXED32: {
        uint32_t v;
        if (!in_->ReadLittleEndian32(&v)) return Malformed("a truncated fixed32");
        return absl::OkStatus();
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length;
        if (!in_->ReadVarint32(&length) || length > static_cast<uint32_t>(INT32_MAX))
          return Malformed("a bad length");
        if (f != nullptr && f->type() == FieldDescriptor::TYPE_MESSAGE) {
          const CodedInputStream::Limit limit = in_->PushLimit(static_cast<int>(length));
          if (in_->BytesUntilLimit() != static_cast<int>(length))
            return Malformed("a field longer than the message");
          absl::Status s = Message(f->message_type(), depth + 1, 0);
          if (!s.ok()) return s;
          if (!in_->ConsumedEntireMessage()) return Malformed("a bad submessage");
          in_->PopLimit(limit);
          return absl::OkStatus();
        }
        if (!in_->Skip(static_cast<int>(length))) return Malformed("a truncated field");
        return absl::OkStatus();
      }
      case WireFormatLite::WIRETYPE_START_GROUP:
        // proto3 has no groups: its fields are unknown, each counted.
        return Message(nullptr, depth + 1, number);
      default:
        return Malformed("wire type 6 or 7");
    }
  }

  absl::Status Malformed(const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(top_.full_name(), " message is malformed: ", what));
  }

  CodedInputStream* const in_;
  const Descriptor& top_;
  const int64_t max_;
  int64_t count_ = 0;
};

}  // namespace

absl::StatusOr<int64_t> CountWireElements(const Descriptor& type,
                                          google::protobuf::io::ZeroCopyInputStream* in,
                                          int64_t max_elements) {
  CodedInputStream coded(in);
  Counter counter(&coded, type, max_elements);
  if (absl::Status s = counter.Message(&type, 0, 0); !s.ok()) return s;
  return counter.count();
}

}  // namespace frameworm
