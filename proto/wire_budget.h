// What parsing a protobuf message would allocate, counted on its wire bytes
// before it is parsed. Parsing allocates an object per element of a
// repeated string, bytes or message field (a map entry too) and per
// unknown field, a few to a few hundred bytes from two or three bytes of
// input: 16 MiB of empty elements costs a parser 0.2-2 GB. CountWireElements
// walks the bytes with the message's descriptor, allocating nothing, and
// stops once the count passes the budget.
//
// Counted: each element of a repeated field that is not packed (strings,
// bytes, messages, map entries, scalars sent one by one), each packed run
// (one), each submessage, singular ones too (inside a repeated entry each
// is an object of its own), each unknown field (a field the type lacks, or
// a known one with the wrong wire type, which protobuf keeps as unknown),
// and everything inside submessages and unknown groups. Singular scalars
// and strings are not counted: a repeat of one replaces the one value.
//
// Errors: RESOURCE_EXHAUSTED once the count passes `max_elements` (the
// message names the type and the budget); INVALID_ARGUMENT for bytes that
// are not a well-formed message (a truncated varint or field, wire type 6
// or 7, field number 0, an unbalanced group, nesting deeper than 100, as
// protobuf's parser refuses too). A message that protobuf's parser accepts
// is never refused as malformed.
//
// Thread safety: a pure function.
#ifndef FRAMEWORM_PROTO_WIRE_BUDGET_H_
#define FRAMEWORM_PROTO_WIRE_BUDGET_H_

#include <cstdint>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include "absl/status/statusor.h"

namespace frameworm {

// Elements counted in the message `in` holds (read to its end), or an error
// as above. `in` is consumed.
absl::StatusOr<int64_t> CountWireElements(const google::protobuf::Descriptor& type,
                                          google::protobuf::io::ZeroCopyInputStream* in,
                                          int64_t max_elements);

}  // namespace frameworm

#endif  // FRAMEWORM_PROTO_WIRE_BUDGET_H_
