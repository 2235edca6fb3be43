#include "coordinator/generation_plan.h"

#include <set>
#include <string>
#include <vector>

#include "common/rank_env.h"
#include "gtest/gtest.h"
#include "proto/rank_env_proto.h"

namespace frameworm::coordinator {
namespace {

v1::JobSpec Spec(int nproc) {
  v1::JobSpec s;
  s.set_name("plan");
  s.set_nproc_per_node(nproc);
  (*s.mutable_env())["FOO"] = "bar";
  (*s.mutable_train_options())["model"] = "mlp";
  return s;
}

GenerationInputs Inputs() {
  GenerationInputs in;
  in.generation = 3;
  in.workers = {"wa", "wb"};
  in.master_addr = "wa.host";
  in.master_port = 29507;
  in.resume_from = "/ck/job-1/step-40";
  in.coordinator = "10.0.0.1:7070";
  in.state_dir = "/state";
  in.started_ms = 1234;
  in.fence_after = absl::Seconds(7);
  return in;
}

TEST(GenerationPlanTest, RanksAreNodeMajorWithTheirRankEnvironment) {
  const GenerationPlan plan = PlanGeneration("job-1", Spec(2), Inputs());
  ASSERT_EQ(plan.ranks.size(), 4u);
  ASSERT_EQ(plan.assignments.size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    const RankState& r = plan.ranks[rank];
    EXPECT_EQ(r.worker, rank < 2 ? "wa" : "wb");
    RankEnv want;
    want.rank = rank;
    want.world_size = 4;
    want.local_rank = rank % 2;
    want.local_world_size = 2;
    want.node_rank = rank / 2;
    want.master_addr = "wa.host";
    want.master_port = 29507;
    want.coordinator = "10.0.0.1:7070";
    want.job_id = "job-1";
    want.generation = 3;
    want.resume_from = "/ck/job-1/step-40";
    want.checkpoint_dir = "/state/checkpoints/job-1";  // the directory reports are checked against
    EXPECT_EQ(RankEnvOf(r.task), want) << "rank " << rank;
    // Only the job's own env travels in TaskSpec.env.
    EXPECT_EQ(r.task.env_size(), 1);
    EXPECT_EQ(r.task.env().at("FOO"), "bar");
    EXPECT_EQ(r.task.fence_after_s(), 7.0);
    const std::vector<std::string> argv(r.task.argv().begin(),
                                        r.task.argv().end());
    EXPECT_EQ(argv, (std::vector<std::string>{
                        "frameworm-train", "--model=mlp",
                        "--checkpoint-dir=/state/checkpoints/job-1"}));
    const AssignmentRow& a = plan.assignments[rank];
    EXPECT_EQ(a.job_id, "job-1");
    EXPECT_EQ(a.generation, 3);
    EXPECT_EQ(a.rank, rank);
    EXPECT_EQ(a.worker, r.worker);
    EXPECT_EQ(a.state, 0);
    v1::TaskSpec stored;
    ASSERT_TRUE(stored.ParseFromString(a.task));
    EXPECT_EQ(stored.SerializeAsString(), r.task.SerializeAsString());
  }
  EXPECT_EQ(plan.row.job_id, "job-1");
  EXPECT_EQ(plan.row.generation, 3);
  EXPECT_EQ(plan.row.started_ms, 1234);
  EXPECT_EQ(plan.row.master_port, 29507);
  EXPECT_EQ(plan.row.resume_from, "/ck/job-1/step-40");
  EXPECT_EQ(plan.row.ended_ms, 0);
}

TEST(GenerationPlanTest, ArgvOfBuiltInAndCustomEntrypoints) {
  v1::JobSpec s = Spec(1);
  (*s.mutable_train_options())["epochs"] = "2";
  s.add_entrypoint("frameworm-train");
  s.add_entrypoint("--verbose");
  s.set_backend("gloo");
  s.mutable_checkpoint()->set_every_n_steps(50);
  EXPECT_EQ(
      TaskArgv(s, "/c"),
      (std::vector<std::string>{"frameworm-train", "--epochs=2", "--model=mlp",
                                "--verbose", "--checkpoint-dir=/c",
                                "--checkpoint-every=50", "--backend=gloo"}));
  EXPECT_EQ(TaskArgv(s, "").size(), 6u);  // no --checkpoint-dir
  v1::JobSpec custom;
  custom.add_entrypoint("/usr/bin/python3");
  custom.add_entrypoint("train.py");
  custom.set_backend("nccl");
  EXPECT_EQ(TaskArgv(custom, "/c"),
            (std::vector<std::string>{"/usr/bin/python3", "train.py"}));
}

// A custom entrypoint learns both checkpoint directories from its rank
// environment; none for memory when the coordinator or the job takes no
// in-memory checkpoints.
TEST(GenerationPlanTest, EntrypointsGetTheirCheckpointDirectories) {
  v1::JobSpec spec;
  spec.set_name("py");
  spec.set_nproc_per_node(1);
  spec.add_entrypoint("python3");
  spec.add_entrypoint("train.py");
  GenerationInputs in = Inputs();
  in.memory_dir = "/dev/shm/frameworm/job-1-1234";
  GenerationPlan plan = PlanGeneration("job-1", spec, in);
  ASSERT_EQ(plan.ranks.size(), 2u);
  for (const RankState& r : plan.ranks) {
    const RankEnv env = RankEnvOf(r.task);
    EXPECT_EQ(env.checkpoint_dir, "/state/checkpoints/job-1");
    EXPECT_EQ(env.memory_checkpoint_dir, "/dev/shm/frameworm/job-1-1234");
    EXPECT_EQ(env.memory_checkpoint_every, 0);  // automatic
    EXPECT_EQ(ToEnvironment(env).at("FRAMEWORM_MEMORY_CHECKPOINT_EVERY"), "auto");
    EXPECT_EQ(r.task.argv_size(), 2);  // the entrypoint as given
  }
  spec.mutable_checkpoint()->set_memory_every_n_steps(25);
  plan = PlanGeneration("job-1", spec, in);
  EXPECT_EQ(RankEnvOf(plan.ranks[1].task).memory_checkpoint_every, 25);
  EXPECT_EQ(ToEnvironment(RankEnvOf(plan.ranks[1].task)).at("FRAMEWORM_MEMORY_CHECKPOINT_EVERY"),
            "25");
  // A value off the wire outside 1..10^9 reads as automatic.
  for (int64_t hostile : {int64_t{-3}, int64_t{1'000'000'001}, INT64_MAX}) {
    plan.ranks[1].task.set_memory_checkpoint_every(hostile);
    EXPECT_EQ(RankEnvOf(plan.ranks[1].task).memory_checkpoint_every, 0) << hostile;
  }
  spec.mutable_checkpoint()->set_memory_every_n_steps(0);
  plan = PlanGeneration("job-1", spec, in);
  EXPECT_EQ(RankEnvOf(plan.ranks[0].task).memory_checkpoint_dir, "");
  spec.mutable_checkpoint()->clear_memory_every_n_steps();
  in.memory_dir = "";
  plan = PlanGeneration("job-1", spec, in);
  EXPECT_EQ(RankEnvOf(plan.ranks[0].task).memory_checkpoint_dir, "");
  EXPECT_EQ(RankEnvOf(plan.ranks[0].task).checkpoint_dir, "/state/checkpoints/job-1");
}

TEST(GenerationPlanTest, CheckpointDirAndMasterHost) {
  v1::JobSpec s = Spec(1);
  EXPECT_EQ(CheckpointDir(s, "job-7", "/state"), "/state/checkpoints/job-7");
  s.mutable_checkpoint()->set_dir("/shared/ckpt");
  EXPECT_EQ(CheckpointDir(s, "job-7", "/state"), "/shared/ckpt/job-7");
  EXPECT_EQ(MasterHost("node3:9000"), "node3");
  EXPECT_EQ(MasterHost("node3"), "node3");
  EXPECT_EQ(MasterHost("fe80::1"), "fe80::1");
}

}  // namespace
}  // namespace frameworm::coordinator
