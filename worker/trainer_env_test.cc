#include "worker/trainer_env.h"

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(TrainerEnvTest, OnlyTheAllowListAndTheOperatorsExtrasPass) {
  const std::map<std::string, std::string> worker = {
      {"PATH", "/usr/bin"},          {"HOME", "/home/w"},
      {"LC_ALL", "C.UTF-8"},         {"NCCL_DEBUG", "INFO"},
      {"AWS_SECRET_ACCESS_KEY", "s"}, {"FRAMEWORM_TOKEN_FILE", "/x"},
      {"WANDB_API_KEY", "k"},        {"HF_HOME", "/hf"},
      {"PATHX", "no"}};
  auto env = TrainerBaseEnv(worker, {});
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"PATH", "/usr/bin"},
                                                    {"HOME", "/home/w"},
                                                    {"LC_ALL", "C.UTF-8"},
                                                    {"NCCL_DEBUG", "INFO"}}));
  env = TrainerBaseEnv(worker, {"WANDB_*", "HF_HOME"});
  EXPECT_EQ(env.count("WANDB_API_KEY"), 1u);
  EXPECT_EQ(env.count("HF_HOME"), 1u);
  EXPECT_EQ(env.count("AWS_SECRET_ACCESS_KEY"), 0u);
}

TEST(TrainerEnvTest, BadAllowEntriesAreNamed) {
  EXPECT_TRUE(CheckAllowEntry("HF_HOME").ok());
  EXPECT_TRUE(CheckAllowEntry("WANDB_*").ok());
  for (const char* bad : {"", "*", "1X", "A-B", "A*B", "A B"}) {
    absl::Status s = CheckAllowEntry(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::string("'") + bad + "'"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace frameworm
