#include "worker/checkpoint_holdings.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/node_address.h"
#include "common/printable.h"
#include "common/received_file.h"

namespace frameworm {

absl::Status CheckHold(const HeldCheckpoint& h) {
  if (absl::Status s = CheckJobIdComponent(h.job_id); !s.ok()) return s;
  if (h.step < 0) return absl::InvalidArgumentError(absl::StrCat("hold: step ", h.step, " < 0"));
  const std::string name = absl::StrCat("/ckpt-", h.step, ".pt");
  bool normal = !h.path.empty() && h.path.size() <= 4096 && h.path[0] == '/' &&
                absl::EndsWith(h.path, name) && h.path.size() > name.size() &&
                h.path.find('\0') == std::string::npos;
  if (normal) {
    for (absl::string_view part : absl::StrSplit(h.path.substr(1), '/')) {
      if (part == "." || part == "..") normal = false;
    }
  }
  if (!normal) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hold: path '", PrintableLine(h.path, 200), "' is not an absolute, normal path ending in ",
        name.substr(1)));
  }
  if (h.bytes < 0 || h.bytes > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("hold: size ", h.bytes, " out of [0, 1 TiB]"));
  }
  if (!IsCrc32Text(h.checksum)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hold: checksum '", PrintableLine(h.checksum, 40), "' is not crc32:xxxxxxxx"));
  }
  if (h.secret.size() > 128) {
    return absl::InvalidArgumentError("hold: secret longer than 128 bytes");
  }
  if (h.sources.size() > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("hold: ", h.sources.size(), " sources; at most 8"));
  }
  for (const std::string& src : h.sources) {
    if (src.empty() || src.size() > 256) {
      return absl::InvalidArgumentError("hold: a source is empty or longer than 256 bytes");
    }
    if (!IsNetworkEndpoint(src)) {  // it is dialled with the hold's secret
      return absl::InvalidArgumentError(absl::StrCat(
          "hold: source '", PrintableLine(src, 80), "' is not HOST:PORT of a TCP peer"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointHoldings::Add(const HeldCheckpoint& h) {
  if (absl::Status s = CheckHold(h); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  const auto key = std::make_pair(h.job_id, h.step);
  if (held_.size() >= kMaxHeldCheckpoints && !held_.count(key)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this worker already holds ", held_.size(), " checkpoints (at most ",
                     kMaxHeldCheckpoints, ")"));
  }
  HeldCheckpoint kept = h;
  kept.sources.clear();  // what it was fetched from is not kept
  held_[key] = std::move(kept);
  return absl::OkStatus();
}

std::optional<HeldCheckpoint> CheckpointHoldings::Find(const std::string& job_id,
                                                       int64_t step) const {
  absl::MutexLock l(&mu_);
  auto it = held_.find({job_id, step});
  if (it == held_.end()) return std::nullopt;
  return it->second;
}

std::vector<HeldCheckpoint> CheckpointHoldings::Remove(const std::string& job_id, int64_t step) {
  absl::MutexLock l(&mu_);
  std::vector<HeldCheckpoint> out;
  for (auto it = held_.lower_bound({job_id, step < 0 ? INT64_MIN : step});
       it != held_.end() && it->first.first == job_id && (step < 0 || it->first.second == step);) {
    out.push_back(std::move(it->second));
    it = held_.erase(it);
  }
  return out;
}

std::vector<HeldCheckpoint> CheckpointHoldings::All() const {
  absl::MutexLock l(&mu_);
  std::vector<HeldCheckpoint> out;
  for (const auto& [key, h] : held_) out.push_back(h);
  return out;
}

size_t CheckpointHoldings::size() const {
  absl::MutexLock l(&mu_);
  return held_.size();
}

}  // namespace frameworm
