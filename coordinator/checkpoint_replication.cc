#include "coordinator/checkpoint_replication.h"

#include <algorithm>
#include <set>

namespace frameworm::coordinator {
namespace {

constexpr int kMaxSources = 8;

v1::CoordinatorMessage Hold(const v1::CheckpointRecord& rec,
                            const std::vector<std::string>& sources) {
  v1::CoordinatorMessage m;
  v1::HoldCheckpoint* h = m.mutable_hold();
  h->set_job_id(rec.ref().job_id());
  h->set_step(rec.step());
  h->set_path(rec.path());
  h->set_bytes(rec.bytes());
  h->set_checksum(rec.checksum());
  h->set_secret(rec.secret());
  for (const std::string& s : sources) {
    if (h->sources_size() == kMaxSources) break;
    h->add_sources(s);
  }
  return m;
}

bool Serves(const WorkerRegistry& workers, const std::string& name) {
  const WorkerRegistry::Worker* w = workers.Find(name);
  return w != nullptr && !w->peer_endpoint.empty();
}

bool CanFetch(const WorkerRegistry& workers, const std::string& name) {
  const WorkerRegistry::Worker* w = workers.Find(name);
  return w != nullptr && workers.Schedulable(*w);
}

}  // namespace

WorkerCommand SourceHold(const v1::CheckpointRecord& rec, const std::string& source) {
  return {source, Hold(rec, {})};
}

std::vector<WorkerCommand> ReplicaHolds(const WorkerRegistry& workers,
                                        const v1::CheckpointRecord& rec,
                                        const std::string& source,
                                        const std::vector<std::string>& job_workers,
                                        int replicas) {
  std::vector<WorkerCommand> out;
  if (replicas <= 0 || !Serves(workers, source)) return out;
  const std::vector<std::string> from = {workers.Find(source)->peer_endpoint};
  std::vector<std::string> order;
  for (const std::string& w : job_workers) order.push_back(w);
  for (const WorkerRegistry::Worker* w : workers.All()) order.push_back(w->name);
  std::set<std::string> chosen(rec.holders().begin(), rec.holders().end());
  chosen.insert(source);
  int sent = 0;
  for (const std::string& w : order) {
    if (sent == replicas) break;
    if (chosen.count(w) || !CanFetch(workers, w)) continue;
    ++sent;
    chosen.insert(w);
    out.emplace_back(w, Hold(rec, from));
  }
  return out;
}

std::vector<WorkerCommand> PrefetchCommands(const WorkerRegistry& workers,
                                            const v1::CheckpointRecord& rec,
                                            const std::vector<std::string>& generation_workers) {
  std::vector<std::string> sources;
  for (int live = 1; live >= 0; --live) {  // live holders first
    for (const std::string& h : rec.holders()) {
      if (!Serves(workers, h) || CanFetch(workers, h) != (live == 1)) continue;
      sources.push_back(workers.Find(h)->peer_endpoint);
    }
  }
  std::vector<WorkerCommand> out;
  if (sources.empty()) return out;
  std::set<std::string> done(rec.holders().begin(), rec.holders().end());
  for (const std::string& w : generation_workers) {
    if (!done.insert(w).second || workers.Find(w) == nullptr) continue;
    out.emplace_back(w, Hold(rec, sources));
  }
  return out;
}

std::vector<WorkerCommand> DropCommands(const std::string& job_id, int64_t step,
                                        const std::vector<std::string>& holders) {
  std::vector<WorkerCommand> out;
  for (const std::string& w : holders) {
    v1::CoordinatorMessage m;
    m.mutable_drop()->set_job_id(job_id);
    m.mutable_drop()->set_step(step);
    out.emplace_back(w, std::move(m));
  }
  return out;
}

}  // namespace frameworm::coordinator
