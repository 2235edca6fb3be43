#include "coordinator/generation_plan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "jobspec/job_spec.h"
#include "proto/rank_env_proto.h"

namespace frameworm::coordinator {

bool TakesMemoryCheckpoints(const v1::JobSpec& spec, const std::string& memory_dir) {
  const v1::CheckpointPolicy& c = spec.checkpoint();
  return !memory_dir.empty() && !(c.has_memory_every_n_steps() && c.memory_every_n_steps() == 0);
}

std::vector<std::string> TaskArgv(const v1::JobSpec& spec,
                                  const std::string& checkpoint_dir,
                                  const std::string& memory_dir) {
  const auto& ep = spec.entrypoint();
  if (!UsesBuiltInTrainer(spec)) return std::vector<std::string>(ep.begin(), ep.end());
  std::vector<std::string> argv = {"frameworm-train"};
  std::map<std::string, std::string> sorted(spec.train_options().begin(),
                                            spec.train_options().end());
  for (const auto& [k, v] : sorted)
    argv.push_back(absl::StrCat("--", k, "=", v));
  for (int i = 1; i < ep.size(); ++i) argv.push_back(ep[i]);
  if (!checkpoint_dir.empty())
    argv.push_back(absl::StrCat("--checkpoint-dir=", checkpoint_dir));
  if (spec.checkpoint().every_n_steps() > 0)
    argv.push_back(
        absl::StrCat("--checkpoint-every=", spec.checkpoint().every_n_steps()));
  if (TakesMemoryCheckpoints(spec, memory_dir)) {
    const v1::CheckpointPolicy& c = spec.checkpoint();
    argv.push_back(absl::StrCat("--memory-checkpoint-dir=", memory_dir));
    argv.push_back(absl::StrCat("--memory-checkpoint-every=",
                                c.has_memory_every_n_steps()
                                    ? absl::StrCat(c.memory_every_n_steps())
                                    : std::string("auto")));
  }
  if (!spec.backend().empty())
    argv.push_back(absl::StrCat("--backend=", spec.backend()));
  return argv;
}

std::string MemoryCheckpointDir(const std::string& memory_root, const std::string& job_id,
                                int64_t submitted_ms) {
  return absl::StrCat(memory_root, "/", job_id, "-", submitted_ms);
}

std::string CheckpointDir(const v1::JobSpec& spec, const std::string& job_id,
                          const std::string& state_dir) {
  namespace fs = std::filesystem;
  const fs::path root = spec.checkpoint().dir().empty()
                            ? fs::path(state_dir) / "checkpoints"
                            : fs::path(spec.checkpoint().dir());
  return (root / job_id).string();
}

std::string MasterHost(const std::string& address) {
  if (std::count(address.begin(), address.end(), ':') != 1) return address;
  return address.substr(0, address.find(':'));
}

v1::TaskSpec BuildTask(const v1::JobSpec& spec, const RankEnv& env,
                       const std::string& checkpoint_dir,
                       absl::Duration fence_after, const std::string& memory_dir) {
  v1::TaskSpec t;
  SetRankEnv(env, &t);
  t.set_fence_after_s(absl::ToDoubleSeconds(fence_after));
  for (std::string& a : TaskArgv(spec, checkpoint_dir, memory_dir))
    t.add_argv(std::move(a));
  t.mutable_env()->insert(spec.env().begin(), spec.env().end());
  t.mutable_env()->insert(spec.secret_env().begin(), spec.secret_env().end());
  return t;
}

GenerationPlan PlanGeneration(const std::string& job_id,
                              const v1::JobSpec& spec,
                              const GenerationInputs& in) {
  GenerationPlan plan;
  plan.row.job_id = job_id;
  plan.row.generation = in.generation;
  plan.row.started_ms = in.started_ms;
  plan.row.master_addr = in.master_addr;
  plan.row.master_port = in.master_port;
  plan.row.resume_from = in.resume_from;
  const int nproc = spec.nproc_per_node();
  const int nodes = static_cast<int>(in.workers.size());
  const std::string ckpt_dir = CheckpointDir(spec, job_id, in.state_dir);
  for (int node = 0; node < nodes; ++node) {
    for (int local = 0; local < nproc; ++local) {
      RankEnv env;
      env.rank = node * nproc + local;
      env.world_size = nodes * nproc;
      env.local_rank = local;
      env.local_world_size = nproc;
      env.node_rank = node;
      env.master_addr = in.master_addr;
      env.master_port = in.master_port;
      env.coordinator = in.coordinator;
      env.job_id = job_id;
      env.generation = in.generation;
      env.resume_from = in.resume_from;
      env.checkpoint_dir = ckpt_dir;
      if (TakesMemoryCheckpoints(spec, in.memory_dir)) {
        env.memory_checkpoint_dir = in.memory_dir;
        env.memory_checkpoint_every = spec.checkpoint().memory_every_n_steps();  // 0: auto
      }
      if (in.new_token) env.token = in.new_token();
      RankState r;
      r.worker = in.workers[node];
      r.task = BuildTask(spec, env, ckpt_dir, in.fence_after, in.memory_dir);
      AssignmentRow a;
      a.job_id = job_id;
      a.generation = in.generation;
      a.rank = env.rank;
      a.worker = r.worker;
      a.node_rank = node;
      a.local_rank = local;
      r.task.SerializeToString(&a.task);
      plan.assignments.push_back(std::move(a));
      plan.ranks.push_back(std::move(r));
    }
  }
  return plan;
}

}  // namespace frameworm::coordinator
