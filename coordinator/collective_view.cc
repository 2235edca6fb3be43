#include "coordinator/collective_view.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/collective_text.h"
#include "absl/strings/str_join.h"

namespace frameworm::coordinator {

const CollectiveOpView* RankCollectives::Find(int64_t seq) const {
  for (const CollectiveOpView& op : recent) {
    if (op.seq == seq) return &op;
  }
  return nullptr;
}

std::string DescribeCollective(const CollectiveOpView& op) {
  return CollectiveText(op.seq, op.op, op.what, op.bucket, op.bytes);
}

namespace {

std::string Ranks(const std::vector<int>& r) {
  return absl::StrCat(r.size() > 1 ? "ranks " : "rank ", absl::StrJoin(r, ", "));
}

bool SameCollective(const CollectiveOpView& a, const CollectiveOpView& b) {
  return a.op == b.op && a.what == b.what && a.bucket == b.bucket && a.bytes == b.bytes;
}

}  // namespace

std::optional<CollectiveVerdict> CompareCollectives(
    const std::vector<const RankCollectives*>& ranks, absl::Time now) {
  // Collectives complete in order, and only once every rank entered
  // them: the first one no rank has completed is what the waiting ranks
  // wait in. (A rank's own record can be older than another's: pings come
  // about once a second, and a stopped rank's last one stays.)
  int with = 0;
  int64_t done = 0, issued = 0;
  for (const RankCollectives* r : ranks) {
    if (r == nullptr) continue;
    ++with;
    done = std::max(done, r->completed);
    issued = std::max(issued, r->enqueued);
  }
  const int64_t oldest = done + 1;
  if (with < 2 || issued < oldest) return std::nullopt;
  CollectiveVerdict v;
  v.seq = oldest;
  std::vector<int> entered;
  const CollectiveOpView* record = nullptr;
  double waited = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankCollectives* r = ranks[i];
    if (r == nullptr) continue;
    if (r->enqueued < oldest) {
      v.behind.push_back(static_cast<int>(i));
    } else if (r->completed < oldest) {
      entered.push_back(static_cast<int>(i));
    }
    if (const CollectiveOpView* x = r->Find(oldest)) {
      if (record == nullptr) {
        record = x;
      } else if (!SameCollective(*x, *record)) {
        v.desynchronized = true;
      }
      if (r->completed < oldest) {
        waited = std::max(waited, x->age_seconds + absl::ToDoubleSeconds(now - r->at));
      }
    }
  }
  const std::string name = record != nullptr ? DescribeCollective(*record)
                                             : absl::StrCat("#", oldest);
  if (v.desynchronized) {
    std::vector<std::string> each;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const CollectiveOpView* x = ranks[i] != nullptr ? ranks[i]->Find(oldest) : nullptr;
      if (x != nullptr) each.push_back(absl::StrCat("rank ", i, " ", DescribeCollective(*x)));
    }
    v.text = absl::StrCat("flight recorder: the ranks disagree on collective #", oldest, " (",
                          absl::StrJoin(each, "; "),
                          "): their programs issue different collectives (desynchronized)");
    return v;
  }
  if (!v.behind.empty()) {
    std::vector<std::string> last;
    for (int b : v.behind) {
      const RankCollectives& r = *ranks[b];
      const CollectiveOpView* x = r.Find(r.enqueued);
      last.push_back(absl::StrCat(
          "rank ", b, ": ",
          x != nullptr ? absl::StrCat(DescribeCollective(*x), " ", x->state)
                       : r.enqueued > 0 ? absl::StrCat("#", r.enqueued) : std::string("none"),
          absl::StrFormat(" at its ping %.1f s ago", absl::ToDoubleSeconds(now - r.at))));
    }
    v.text = absl::StrCat("flight recorder: ", Ranks(v.behind), " never reached collective ", name);
    if (!entered.empty()) {
      absl::StrAppend(&v.text, ", which ", Ranks(entered), entered.size() > 1 ? " wait" : " waits",
                      " in", absl::StrFormat(" for %.1f s", waited));
    }
    absl::StrAppend(&v.text, " (last issued: ", absl::StrJoin(last, "; "), ")");
    return v;
  }
  v.text = absl::StrCat("flight recorder: every rank entered collective ", name,
                        absl::StrFormat(" (%.1f s ago)", waited),
                        " and none completed it: a rank stopped inside it, or the network "
                        "between them");
  return v;
}

}  // namespace frameworm::coordinator
