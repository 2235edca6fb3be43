#include "proto/rank_env_proto.h"

namespace frameworm {

void SetRankEnv(const RankEnv& e, v1::TaskSpec* t) {
  t->mutable_ref()->set_job_id(e.job_id);
  t->mutable_ref()->set_generation(e.generation);
  t->set_rank(e.rank);
  t->set_world_size(e.world_size);
  t->set_local_rank(e.local_rank);
  t->set_local_world_size(e.local_world_size);
  t->set_node_rank(e.node_rank);
  t->set_master_addr(e.master_addr);
  t->set_master_port(e.master_port);
  t->set_resume_from(e.resume_from);
  t->set_coordinator(e.coordinator);
  t->set_token(e.token);
  t->set_checkpoint_dir(e.checkpoint_dir);
  t->set_memory_checkpoint_dir(e.memory_checkpoint_dir);
  t->set_memory_checkpoint_every(e.memory_checkpoint_every);
}

RankEnv RankEnvOf(const v1::TaskSpec& t) {
  RankEnv e;
  e.job_id = t.ref().job_id();
  e.generation = t.ref().generation();
  e.rank = t.rank();
  e.world_size = t.world_size();
  e.local_rank = t.local_rank();
  e.local_world_size = t.local_world_size();
  e.node_rank = t.node_rank();
  e.master_addr = t.master_addr();
  e.master_port = t.master_port();
  e.resume_from = t.resume_from();
  e.coordinator = t.coordinator();
  e.token = t.token();
  e.checkpoint_dir = t.checkpoint_dir();
  e.memory_checkpoint_dir = t.memory_checkpoint_dir();
  // Bounded: anything outside [1, kMaxMemoryCheckpointEvery] means automatic.
  const int64_t every = t.memory_checkpoint_every();
  e.memory_checkpoint_every = every >= 1 && every <= kMaxMemoryCheckpointEvery ? every : 0;
  return e;
}

}  // namespace frameworm
