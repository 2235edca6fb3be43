#include "coordinator/collective_report.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {
namespace {

bool ShortName(const std::string& s) {
  if (s.empty() || s.size() > 32) return false;
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

bool Seconds(double v) { return std::isfinite(v) && v >= 0 && v <= 1e7; }

}  // namespace

absl::Status CheckCollectiveProgress(const v1::CollectiveProgress& c) {
  constexpr int64_t kMaxSeq = int64_t{1} << 62;
  if (c.enqueued() < 0 || c.enqueued() > kMaxSeq || c.completed() < 0 ||
      c.completed() > c.enqueued()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collectives: need 0 <= completed <= enqueued <= 2^62, got completed ", c.completed(),
        ", enqueued ", c.enqueued()));
  }
  if (c.recent_size() > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("collectives: ", c.recent_size(), " recent records; at most 16"));
  }
  int64_t prev = 0;
  for (const v1::CollectiveOp& op : c.recent()) {
    if (op.seq() <= prev || op.seq() > c.enqueued()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collectives: record #", op.seq(), " out of order or beyond enqueued ", c.enqueued()));
    }
    prev = op.seq();
    if (!ShortName(op.op()) || !ShortName(op.what())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collectives: record #", op.seq(), ": op and what must be 1 to 32 printable characters"));
    }
    if (op.state() != "enqueued" && op.state() != "started" && op.state() != "completed" &&
        op.state() != "failed") {
      return absl::InvalidArgumentError(absl::StrCat(
          "collectives: record #", op.seq(),
          ": state must be enqueued, started, completed or failed"));
    }
    if (op.bucket() < -1 || op.bucket() > (1 << 20) || op.bytes() < 0 ||
        op.bytes() > (int64_t{1} << 50)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collectives: record #", op.seq(), ": bucket ", op.bucket(), " or bytes ", op.bytes(),
          " out of range"));
    }
    if (!Seconds(op.age_seconds()) || !Seconds(op.seconds())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collectives: record #", op.seq(), ": age_seconds and seconds must be finite, 0 to 1e7"));
    }
  }
  return absl::OkStatus();
}

RankCollectives ToRankCollectives(const v1::CollectiveProgress& c) {
  RankCollectives out;
  out.enqueued = c.enqueued();
  out.completed = c.completed();
  for (const v1::CollectiveOp& op : c.recent()) {
    CollectiveOpView v;
    v.seq = op.seq();
    v.op = op.op();
    v.what = op.what();
    v.bucket = op.bucket();
    v.bytes = op.bytes();
    v.state = op.state();
    v.age_seconds = op.age_seconds();
    v.seconds = op.seconds();
    out.recent.push_back(std::move(v));
  }
  return out;
}

v1::CollectiveProgress ToCollectiveProgress(const RankCollectives& r) {
  v1::CollectiveProgress out;
  out.set_enqueued(r.enqueued);
  out.set_completed(r.completed);
  for (const CollectiveOpView& v : r.recent) {
    v1::CollectiveOp* op = out.add_recent();
    op->set_seq(v.seq);
    op->set_op(v.op);
    op->set_what(v.what);
    op->set_bucket(v.bucket);
    op->set_bytes(v.bytes);
    op->set_state(v.state);
    op->set_age_seconds(v.age_seconds);
    op->set_seconds(v.seconds);
  }
  return out;
}

}  // namespace frameworm::coordinator
