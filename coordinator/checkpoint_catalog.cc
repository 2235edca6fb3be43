#include "coordinator/checkpoint_catalog.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/printable.h"

namespace frameworm::coordinator {
namespace {

// The catalog's order, oldest first: by generation, then by step. A later
// generation's checkpoint is the newer state whatever its step: a program
// that counts its steps from 0 again after a restart (it does not resume),
// or one resumed from an older checkpoint, saves newer state at lower steps.
bool Older(const v1::CheckpointRecord& a, const v1::CheckpointRecord& b) {
  return std::make_pair(a.ref().generation(), a.step()) <
         std::make_pair(b.ref().generation(), b.step());
}

// The newest generation's record of `step` in `list` (a job's records, in
// the catalog's order); nullptr when there is none.
template <typename Records>
auto NewestOfStep(Records& list, int64_t step) -> decltype(&list.front()) {
  for (auto r = list.rbegin(); r != list.rend(); ++r) {
    if (r->step() == step) return &*r;
  }
  return nullptr;
}

}  // namespace

absl::Status CheckpointCatalog::Load(const std::string& job_id) {
  absl::StatusOr<std::vector<CheckpointRow>> rows =
      store_.LoadCheckpoints(job_id);
  if (!rows.ok()) return rows.status();
  std::vector<v1::CheckpointRecord>& list = jobs_[job_id];
  list.clear();
  for (const CheckpointRow& c : *rows) {
    v1::CheckpointRecord r;
    r.mutable_ref()->set_job_id(c.job_id);
    r.mutable_ref()->set_generation(c.generation);
    r.set_step(c.step);
    r.set_path(c.path);
    r.set_bytes(c.bytes);
    r.set_checksum(c.checksum);
    r.set_created_unix_ms(c.created_ms);
    r.set_secret(c.secret);
    r.set_memory(!memory_root_.empty() && c.path.rfind(memory_root_ + "/", 0) == 0);
    list.push_back(std::move(r));
  }
  std::stable_sort(list.begin(), list.end(), Older);  // the store's rows are by step
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> CheckpointCatalog::Record(
    const v1::CheckpointRecord& rec, int keep_last) {
  if (rec.path().empty())
    return absl::InvalidArgumentError("checkpoint path is empty");
  if (rec.step() < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint step must be >= 0, got ", rec.step()));
  const std::string& job_id = rec.ref().job_id();
  const CheckpointRow row{
      job_id,      rec.ref().generation(), rec.step(),           rec.path(),
      rec.bytes(), rec.checksum(),         rec.created_unix_ms(), rec.secret()};
  if (absl::Status s = store_.AddCheckpoint(row); !s.ok()) return s;
  std::vector<v1::CheckpointRecord>& list = jobs_[job_id];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const v1::CheckpointRecord& c) {
                              return c.path() == rec.path();
                            }),
             list.end());
  list.insert(std::upper_bound(list.begin(), list.end(), rec, Older), rec);
  std::vector<std::string> expired;
  // Per kind: the newest keep_last disk records, the newest kKeepMemory
  // memory records.
  for (const bool memory : {false, true}) {
    const int keep = memory ? kKeepMemory : keep_last;
    int count = 0;
    for (const auto& c : list) count += c.memory() == memory ? 1 : 0;
    for (auto it = list.begin(); keep > 0 && count > keep && it != list.end();) {
      if (it->memory() != memory) {
        ++it;
        continue;
      }
      const std::string path = it->path();
      absl::Status s = store_.DeleteCheckpoint(job_id, path);
      if (!s.ok()) {  // kept (and its files): retried at the next record
        LogStoreError(s, "delete checkpoint");
        break;
      }
      it = list.erase(it);
      --count;
      expired.push_back(path);  // never deleted here: a reported path is not ours
    }
  }
  return expired;
}

const std::vector<v1::CheckpointRecord>& CheckpointCatalog::List(
    const std::string& job_id) const {
  static const std::vector<v1::CheckpointRecord> kNone;
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? kNone : it->second;
}

int CheckpointCatalog::AddHolder(const std::string& job_id, int64_t step,
                                 const std::string& worker) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return 0;
  v1::CheckpointRecord* r = NewestOfStep(it->second, step);
  if (r == nullptr) return 0;
  if (std::find(r->holders().begin(), r->holders().end(), worker) == r->holders().end() &&
      r->holders_size() < kMaxHolders) {
    r->add_holders(worker);
  }
  return r->holders_size();
}

int CheckpointCatalog::KeepOnlyHolds(const std::string& worker,
                                     const std::set<std::pair<std::string, int64_t>>& held) {
  int left = 0;
  for (auto& [job_id, records] : jobs_) {
    for (v1::CheckpointRecord& r : records) {
      if (held.count({job_id, r.step()})) continue;
      auto* holders = r.mutable_holders();
      auto it = std::find(holders->begin(), holders->end(), worker);
      if (it == holders->end()) continue;
      holders->erase(it);
      ++left;
    }
  }
  return left;
}

absl::Status CheckpointCatalog::Remove(const std::string& job_id, const std::string& path) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " has no checkpoints"));
  auto rec = std::find_if(it->second.begin(), it->second.end(),
                          [&](const v1::CheckpointRecord& r) { return r.path() == path; });
  if (rec == it->second.end()) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " recorded no checkpoint at '", PrintableLine(path, 200), "'"));
  }
  if (absl::Status s = store_.DeleteCheckpoint(job_id, path); !s.ok()) return s;
  it->second.erase(rec);
  return absl::OkStatus();
}

void CheckpointCatalog::AdoptSecret(const std::string& job_id, int64_t step,
                                    const std::string& secret) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || secret.empty() || secret.size() > 128) return;
  for (v1::CheckpointRecord& r : it->second) {
    if (r.step() == step && r.secret().empty()) r.set_secret(secret);
  }
}

std::vector<std::string> CheckpointCatalog::JobsWithMemoryRecords() const {
  std::vector<std::string> out;
  for (const auto& [id, list] : jobs_) {
    for (const auto& r : list) {
      if (!r.memory()) continue;
      out.push_back(id);
      break;
    }
  }
  return out;
}

const v1::CheckpointRecord* CheckpointCatalog::Find(const std::string& job_id,
                                                     int64_t step) const {
  return NewestOfStep(List(job_id), step);
}

const v1::CheckpointRecord* CheckpointCatalog::NewestRecord(const std::string& job_id) const {
  const std::vector<v1::CheckpointRecord>& list = List(job_id);
  return list.empty() ? nullptr : &list.back();
}

std::string CheckpointCatalog::Newest(const std::string& job_id) const {
  const std::vector<v1::CheckpointRecord>& list = List(job_id);
  return list.empty() ? "" : list.back().path();
}

}  // namespace frameworm::coordinator
