#include "common/rank_env.h"

#include <map>

#include "gtest/gtest.h"

namespace frameworm {
namespace {

EnvLookup FromMap(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

RankEnv Full() {
  RankEnv e;
  e.rank = 3;
  e.world_size = 4;
  e.local_rank = 1;
  e.local_world_size = 2;
  e.node_rank = 1;
  e.master_addr = "10.0.0.1";
  e.master_port = 29500;
  e.coordinator = "10.0.0.9:7070";
  e.job_id = "job-000001";
  e.generation = 7;
  e.resume_from = "/ckpt/ckpt-100.pt";
  e.checkpoint_dir = "/ckpt";
  e.memory_checkpoint_dir = "/dev/shm/frameworm/job-000001-5";
  e.memory_checkpoint_every = 40;
  e.token = std::string(64, 'a');
  return e;
}

TEST(RankEnvTest, RoundTripsThroughTheEnvironment) {
  const RankEnv e = Full();
  std::map<std::string, std::string> vars = ToEnvironment(e);
  EXPECT_EQ(vars.at("RANK"), "3");
  EXPECT_EQ(vars.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(vars.at("FRAMEWORM_GENERATION"), "7");
  EXPECT_EQ(vars.at("FRAMEWORM_TOKEN"), std::string(64, 'a'));
  EXPECT_EQ(vars.at("FRAMEWORM_CHECKPOINT_DIR"), "/ckpt");
  EXPECT_EQ(vars.at("FRAMEWORM_MEMORY_CHECKPOINT_DIR"), "/dev/shm/frameworm/job-000001-5");
  EXPECT_EQ(vars.at("FRAMEWORM_MEMORY_CHECKPOINT_EVERY"), "40");
  EXPECT_EQ(vars.size(), 15u);
  absl::StatusOr<RankEnv> back = ParseRankEnv(FromMap(vars));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, e);
  // Automatic: written and read back as "auto".
  RankEnv automatic = e;
  automatic.memory_checkpoint_every = 0;
  vars = ToEnvironment(automatic);
  EXPECT_EQ(vars.at("FRAMEWORM_MEMORY_CHECKPOINT_EVERY"), "auto");
  back = ParseRankEnv(FromMap(vars));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, automatic);
}

TEST(RankEnvTest, OptionalVariablesAreOmittedAndDefaulted) {
  RankEnv e;
  e.master_addr = "127.0.0.1";
  e.master_port = 1234;
  e.world_size = 2;
  e.local_world_size = 2;
  std::map<std::string, std::string> vars = ToEnvironment(e);
  EXPECT_FALSE(vars.count("FRAMEWORM_COORDINATOR"));
  EXPECT_FALSE(vars.count("FRAMEWORM_JOB_ID"));
  EXPECT_FALSE(vars.count("FRAMEWORM_RESUME_FROM"));
  EXPECT_FALSE(vars.count("FRAMEWORM_CHECKPOINT_DIR"));
  EXPECT_FALSE(vars.count("FRAMEWORM_MEMORY_CHECKPOINT_DIR"));
  EXPECT_FALSE(vars.count("FRAMEWORM_MEMORY_CHECKPOINT_EVERY"));
  EXPECT_FALSE(vars.count("FRAMEWORM_TOKEN"));
  // torchrun sets only these five plus LOCAL_WORLD_SIZE; NODE_RANK defaults.
  vars.erase("NODE_RANK");
  vars.erase("LOCAL_WORLD_SIZE");
  absl::StatusOr<RankEnv> back = ParseRankEnv(FromMap(vars));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->local_world_size, 2);  // defaults to WORLD_SIZE
  EXPECT_EQ(back->node_rank, 0);
}

// The seed's multi-node recipe exports MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE and RANK only: LOCAL_RANK is RANK modulo LOCAL_WORLD_SIZE
// (which defaults to WORLD_SIZE).
TEST(RankEnvTest, TheFourVariablesOfAPlainMultiNodeLaunchSuffice) {
  std::map<std::string, std::string> vars = {
      {"MASTER_ADDR", "192.168.1.1"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "8"},
      {"RANK", "4"}};
  absl::StatusOr<RankEnv> e = ParseRankEnv(FromMap(vars));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 4);
  EXPECT_EQ(e->local_world_size, 8);
  EXPECT_EQ(e->local_rank, 4);
  vars["LOCAL_WORLD_SIZE"] = "4";  // four processes on each node
  e = ParseRankEnv(FromMap(vars));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->local_rank, 0);
  vars["RANK"] = "7";
  e = ParseRankEnv(FromMap(vars));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->local_rank, 3);
  vars["LOCAL_RANK"] = "2";  // when set, it is what counts
  e = ParseRankEnv(FromMap(vars));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->local_rank, 2);
}

TEST(RankEnvTest, ErrorsNameTheVariable) {
  std::map<std::string, std::string> good = ToEnvironment(Full());
  struct Case {
    std::string var, value, expect;  // value "<unset>" removes it
  } cases[] = {
      {"MASTER_ADDR", "<unset>", "MASTER_ADDR is not set"},
      {"MASTER_ADDR", "", "MASTER_ADDR is empty"},
      {"MASTER_PORT", "70000", "MASTER_PORT=70000 is outside [1, 65535]"},
      {"WORLD_SIZE", "two", "WORLD_SIZE=\"two\" is not an integer"},
      {"RANK", "4", "RANK=4 must be < WORLD_SIZE=4"},
      {"LOCAL_RANK", "-1", "LOCAL_RANK=-1 is outside"},
      {"LOCAL_WORLD_SIZE", "0", "LOCAL_WORLD_SIZE=0 is outside"},
      {"NODE_RANK", "-1", "NODE_RANK=-1 is outside"},
      {"FRAMEWORM_GENERATION", "x", "FRAMEWORM_GENERATION=\"x\""},
      {"FRAMEWORM_MEMORY_CHECKPOINT_EVERY", "0",
       "FRAMEWORM_MEMORY_CHECKPOINT_EVERY=0 is outside [1, 1000000000] (auto or a number of steps)"},
      {"FRAMEWORM_MEMORY_CHECKPOINT_EVERY", "often",
       "FRAMEWORM_MEMORY_CHECKPOINT_EVERY=\"often\" is not an integer (auto or a number"},
  };
  for (const Case& c : cases) {
    std::map<std::string, std::string> vars = good;
    if (c.value == "<unset>")
      vars.erase(c.var);
    else
      vars[c.var] = c.value;
    absl::StatusOr<RankEnv> r = ParseRankEnv(FromMap(vars));
    ASSERT_FALSE(r.ok()) << c.var;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << r.status();
  }
}

TEST(RankEnvTest, ReservedNames) {
  for (const auto& [k, v] : ToEnvironment(Full()))
    EXPECT_TRUE(IsReservedEnvName(k)) << k;
  EXPECT_TRUE(IsReservedEnvName("FRAMEWORM_ANYTHING"));
  EXPECT_FALSE(IsReservedEnvName("PATH"));
  EXPECT_FALSE(IsReservedEnvName("RANKING"));
  EXPECT_FALSE(IsReservedEnvName("OMP_NUM_THREADS"));
}

}  // namespace
}  // namespace frameworm
