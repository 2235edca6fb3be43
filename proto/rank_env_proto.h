// The rank environment (common/rank_env.h) on the wire: the typed fields of
// frameworm.v1.TaskSpec. The coordinator fills a TaskSpec with
// SetRankEnv; the worker reads it back with RankEnvOf.
// Thread safety: free functions.
#ifndef FRAMEWORM_PROTO_RANK_ENV_PROTO_H_
#define FRAMEWORM_PROTO_RANK_ENV_PROTO_H_

#include "common/rank_env.h"
#include "frameworm/v1/worker_service.pb.h"

namespace frameworm {

// Writes ref (job_id, generation), the rank fields, master_*, resume_from
// and coordinator of `task`; leaves argv and env alone.
void SetRankEnv(const RankEnv& env, v1::TaskSpec* task);
RankEnv RankEnvOf(const v1::TaskSpec& task);

}  // namespace frameworm

#endif  // FRAMEWORM_PROTO_RANK_ENV_PROTO_H_
