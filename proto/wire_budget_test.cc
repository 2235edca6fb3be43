// CountWireElements on hand-made wire bytes: what it counts, the budget, the
// malformed inputs it refuses (each also refused by protobuf's parser), and
// that every message type a Frameworm server receives is checked.
#include "proto/wire_budget.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "frameworm/v1/job_service.pb.h"
#include "frameworm/v1/peer_service.pb.h"
#include "frameworm/v1/trainer_service.pb.h"
#include "frameworm/v1/worker_service.pb.h"
#include "proto/checked_serialization.h"

namespace frameworm {
namespace {

using google::protobuf::Descriptor;

absl::StatusOr<int64_t> Count(const Descriptor& type, const std::string& bytes,
                              int64_t max = kMaxWireElements) {
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()),
                                            /*block_size=*/7);  // many small blocks
  return CountWireElements(type, &in, max);
}

std::string Varint(uint64_t v) {
  std::string out;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<char>(v ? b | 0x80 : b));
  } while (v);
  return out;
}
std::string Tag(int number, int wire) { return Varint((static_cast<uint64_t>(number) << 3) | wire); }
std::string Delimited(int number, const std::string& body) {
  return Tag(number, 2) + Varint(body.size()) + body;
}
std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// The largest batch a trainer sends: 256 reports of 64 metrics and 16
// collective records, the per-rank fields packed.
v1::StepReports LargestBatch() {
  v1::StepReports batch;
  for (int r = 0; r < 256; ++r) {
    v1::StepMetrics* m = batch.add_reports();
    m->mutable_ref()->set_job_id("job-1");
    m->set_step(r + 1);
    for (int k = 0; k < 64; ++k) (*m->mutable_values())[absl::StrCat("metric_", k)] = k * 0.5;
    for (int c = 0; c < 16; ++c) m->mutable_collectives()->add_recent()->set_seq(c);
  }
  return batch;
}

TEST(WireBudget, LegitimateLargestBatchIsWithinTheBudgetAndCountedExactly) {
  const std::string bytes = LargestBatch().SerializeAsString();
  absl::StatusOr<int64_t> n = Count(*v1::StepReports::descriptor(), bytes);
  ASSERT_TRUE(n.ok()) << n.status();
  // Each report, its ref and collectives, each map entry, each record.
  EXPECT_EQ(*n, 256 * (1 + 2 + 64 + 16));
  EXPECT_LT(*n, kMaxWireElements / 3);
}

TEST(WireBudget, EmptyRepeatedEntriesPastTheBudgetAreRefusedByName) {
  const std::string bytes = Repeat(Delimited(1, ""), 70000);  // StepReports.reports
  absl::StatusOr<int64_t> n = Count(*v1::StepReports::descriptor(), bytes);
  ASSERT_EQ(n.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(n.status().message().find("frameworm.v1.StepReports"), std::string::npos);
  EXPECT_NE(n.status().message().find("65536"), std::string::npos);
  // Exactly at the budget passes.
  EXPECT_TRUE(Count(*v1::StepReports::descriptor(), Repeat(Delimited(1, ""), 100), 100).ok());
  EXPECT_FALSE(Count(*v1::StepReports::descriptor(), Repeat(Delimited(1, ""), 101), 100).ok());
}

TEST(WireBudget, UnknownFieldsOfEveryWireTypeAreCounted) {
  const Descriptor& reg = *v1::RegisterWorkerRequest::descriptor();
  EXPECT_EQ(*Count(reg, Repeat(Delimited(999, ""), 10)), 10);     // length-delimited
  EXPECT_EQ(*Count(reg, Repeat(Tag(999, 0) + Varint(5), 10)), 10);  // varint
  EXPECT_EQ(*Count(reg, Repeat(Tag(999, 1) + std::string(8, 'x'), 3)), 3);
  EXPECT_EQ(*Count(reg, Repeat(Tag(999, 5) + std::string(4, 'x'), 3)), 3);
  // A group and the fields inside it, nested.
  const std::string group = Tag(998, 3) + Tag(7, 0) + Varint(1) + Tag(6, 3) + Tag(6, 4) + Tag(998, 4);
  EXPECT_EQ(*Count(reg, Repeat(group, 4)), 4 * 3);
  // A known field sent with another wire type is kept as unknown: counted.
  EXPECT_EQ(*Count(reg, Repeat(Tag(1, 0) + Varint(1), 5)), 5);  // name as a varint
  EXPECT_EQ(Count(reg, Repeat(Tag(999, 0) + Varint(1), 70000)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(WireBudget, SingularScalarsAreNotCountedSubmessagesAre) {
  const Descriptor& metrics = *v1::StepMetrics::descriptor();
  // step (singular) 100,000 times: one value, replaced each time.
  const std::string steps = Repeat(Tag(v1::StepMetrics::kStepFieldNumber, 0) + Varint(3), 100000);
  EXPECT_EQ(*Count(metrics, steps), 0);
  v1::StepMetrics parsed;
  EXPECT_TRUE(parsed.ParseFromString(steps));
  // Submessages count, singular ones too (a repeat merges into one object
  // at the top, but inside each repeated entry each is an object: a report
  // with `ref {}` and `collectives {}` is 6 bytes and parses to ~390).
  const std::string ref = Repeat(Delimited(v1::StepMetrics::kRefFieldNumber, ""), 1000);
  EXPECT_EQ(*Count(metrics, ref), 1000);
  const std::string report = Delimited(1, Delimited(v1::StepMetrics::kRefFieldNumber, "") +
                                              Delimited(v1::StepMetrics::kCollectivesFieldNumber, ""));
  EXPECT_EQ(*Count(*v1::StepReports::descriptor(), Repeat(report, 100)), 300);
  // Repeated entries inside a singular submessage (collectives.recent) count.
  v1::StepMetrics m;
  for (int i = 0; i < 1000; ++i) m.mutable_collectives()->add_recent();
  EXPECT_EQ(*Count(metrics, m.SerializeAsString()), 1001);
}

TEST(WireBudget, PackedAndUnpackedRepeatedScalars) {
  // AggregatedStep.rank_step_seconds (repeated double, field 6).
  const Descriptor& agg = *v1::AggregatedStep::descriptor();
  std::string packed_body;
  for (int i = 0; i < 5000; ++i) packed_body += std::string(8, '\0');
  EXPECT_EQ(*Count(agg, Delimited(6, packed_body)), 1);
  EXPECT_EQ(*Count(agg, Repeat(Tag(6, 1) + std::string(8, '\0'), 5000)), 5000);
}

// Each malformed input is refused as INVALID_ARGUMENT, and protobuf's
// parser refuses it too (the check is never stricter than the parser).
TEST(WireBudget, MalformedInputsAreRefusedLikeTheParserRefusesThem) {
  const Descriptor& reg = *v1::RegisterWorkerRequest::descriptor();
  std::string deep;
  for (int i = 0; i < 101; ++i) deep += Tag(50, 3);
  for (int i = 0; i < 101; ++i) deep += Tag(50, 4);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated varint", Tag(999, 0) + "\xff\xff"},
      {"wire type 7", Tag(999, 7)},
      {"wire type 6", Tag(999, 6)},
      {"field number 0", Tag(0, 0) + Varint(1)},
      {"zero byte tag", std::string(1, '\0')},
      {"unclosed group", Tag(999, 3) + Tag(1, 0) + Varint(1)},
      {"end group never opened", Tag(999, 4)},
      {"end group of another number", Tag(999, 3) + Tag(998, 4)},
      {"truncated string", Tag(1, 2) + Varint(50) + "abc"},
      {"truncated fixed64", Tag(999, 1) + "abc"},
      {"nested 101 deep", deep},
      {"submessage longer than its parent",
       Delimited(4, Tag(1, 2) + Varint(40) + "x")},  // running[0].ref, 40 bytes promised
  };
  for (const auto& [what, bytes] : cases) {
    absl::StatusOr<int64_t> n = Count(reg, bytes);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << what << ": " << n.status();
    v1::RegisterWorkerRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(bytes)) << what << " is accepted by protobuf";
  }
}

// Random mutations of a real message: whatever protobuf's parser accepts,
// the count accepts (and counts at least the parsed repeated entries).
TEST(WireBudget, NeverRefusesWhatTheParserAccepts) {
  v1::RegisterWorkerRequest req;
  req.set_name("w1");
  for (int i = 0; i < 3; ++i) {
    v1::TaskStatus* t = req.add_running();
    t->mutable_ref()->set_job_id("job");
    t->set_rank(i);
    t->set_message("running fine");
    v1::CheckpointHeld* h = req.add_held();
    h->set_job_id("job");
    h->set_step(100 + i);
  }
  const std::string base = req.SerializeAsString();
  std::mt19937 rng(4242);
  int accepted = 0;
  google::protobuf::LogSilencer quiet;  // the parser's complaints about bad UTF-8
  for (int trial = 0; trial < 20000; ++trial) {
    std::string b = base;
    const int edits = 1 + static_cast<int>(rng() % 2);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (b.size() + 1);
      switch (rng() % 3) {
        case 0:
          if (at < b.size()) b[at] = static_cast<char>(rng());
          break;
        case 1: b.insert(at, 1, static_cast<char>(rng())); break;
        default:
          if (at < b.size()) b.erase(at, 1);
      }
    }
    v1::RegisterWorkerRequest parsed;
    if (!parsed.ParseFromString(b)) continue;
    ++accepted;
    absl::StatusOr<int64_t> n = Count(*v1::RegisterWorkerRequest::descriptor(), b);
    ASSERT_TRUE(n.ok()) << "trial " << trial << ": " << n.status();
    EXPECT_GE(*n, parsed.running_size() + parsed.ended_size() + parsed.held_size());
  }
  EXPECT_GT(accepted, 1000);  // the property was tried on many accepted inputs
}

TEST(CheckedSerialization, EveryRpcInputTypeIsCheckedBeforeParsing) {
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  int methods = 0;
  for (const char* name : {"frameworm.v1.JobService", "frameworm.v1.WorkerService",
                           "frameworm.v1.TrainerService", "frameworm.v1.PeerService"}) {
    const google::protobuf::ServiceDescriptor* s = pool->FindServiceByName(name);
    ASSERT_NE(s, nullptr) << name;
    for (int i = 0; i < s->method_count(); ++i, ++methods) {
      EXPECT_TRUE(IsWireChecked(s->method(i)->input_type()->full_name()))
          << s->method(i)->full_name() << " takes " << s->method(i)->input_type()->full_name()
          << ", which FRAMEWORM_WIRE_CHECKED_TYPES lacks";
    }
  }
  EXPECT_EQ(methods, 22);
  EXPECT_FALSE(IsWireChecked("frameworm.v1.JobStatus"));  // only ever sent by a server
}

}  // namespace
}  // namespace frameworm
