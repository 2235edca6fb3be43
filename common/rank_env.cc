#include "common/rank_env.h"

#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace frameworm {
namespace {

constexpr const char* kTorchrunNames[] = {
    "RANK",      "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"};

// An integer variable within [min, max]; `fallback` when unset (nullopt:
// required).
absl::StatusOr<int64_t> ParseInt(const EnvLookup& lookup,
                                 const std::string& name, int64_t min,
                                 int64_t max,
                                 std::optional<int64_t> fallback = {}) {
  std::optional<std::string> v = lookup(name);
  if (!v.has_value()) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, " is not set"));
  }
  int64_t out = 0;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, "=\"", *v, "\" is not an integer"));
  }
  if (out < min || out > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "=", out,
                     " is outside [", min, ", ", max, "]"));
  }
  return out;
}

}  // namespace

EnvLookup ProcessEnvLookup() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

bool IsReservedEnvName(absl::string_view name) {
  for (const char* n : kTorchrunNames)
    if (name == n) return true;
  return absl::StartsWith(name, "FRAMEWORM_");
}

std::map<std::string, std::string> ToEnvironment(const RankEnv& e) {
  std::map<std::string, std::string> env = {
      {"RANK", absl::StrCat(e.rank)},
      {"WORLD_SIZE", absl::StrCat(e.world_size)},
      {"LOCAL_RANK", absl::StrCat(e.local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(e.local_world_size)},
      {"NODE_RANK", absl::StrCat(e.node_rank)},
      {"MASTER_ADDR", e.master_addr},
      {"MASTER_PORT", absl::StrCat(e.master_port)},
  };
  if (!e.coordinator.empty()) env["FRAMEWORM_COORDINATOR"] = e.coordinator;
  if (!e.job_id.empty()) {
    env["FRAMEWORM_JOB_ID"] = e.job_id;
    env["FRAMEWORM_GENERATION"] = absl::StrCat(e.generation);
  }
  if (!e.resume_from.empty()) env["FRAMEWORM_RESUME_FROM"] = e.resume_from;
  if (!e.checkpoint_dir.empty()) env["FRAMEWORM_CHECKPOINT_DIR"] = e.checkpoint_dir;
  if (!e.memory_checkpoint_dir.empty()) {
    env["FRAMEWORM_MEMORY_CHECKPOINT_DIR"] = e.memory_checkpoint_dir;
    env["FRAMEWORM_MEMORY_CHECKPOINT_EVERY"] =
        e.memory_checkpoint_every > 0 ? absl::StrCat(e.memory_checkpoint_every) : "auto";
  }
  if (!e.token.empty()) env["FRAMEWORM_TOKEN"] = e.token;
  if (!e.tls_dir.empty()) env["FRAMEWORM_TLS_DIR"] = e.tls_dir;
  return env;
}

absl::StatusOr<RankEnv> ParseRankEnv(const EnvLookup& lookup) {
  RankEnv env;
  std::optional<std::string> addr = lookup("MASTER_ADDR");
  if (!addr.has_value())
    return absl::InvalidArgumentError(
        "environment variable MASTER_ADDR is not set");
  if (addr->empty())
    return absl::InvalidArgumentError(
        "environment variable MASTER_ADDR is empty");
  env.master_addr = *addr;
  constexpr int64_t kMaxRanks = 1 << 20;
  auto port = ParseInt(lookup, "MASTER_PORT", 1, 65535);
  if (!port.ok()) return port.status();
  env.master_port = static_cast<int>(*port);
  auto world = ParseInt(lookup, "WORLD_SIZE", 1, kMaxRanks);
  if (!world.ok()) return world.status();
  env.world_size = static_cast<int>(*world);
  auto rank = ParseInt(lookup, "RANK", 0, kMaxRanks);
  if (!rank.ok()) return rank.status();
  if (*rank >= env.world_size)
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable RANK=", *rank,
                     " must be < WORLD_SIZE=", env.world_size));
  env.rank = static_cast<int>(*rank);
  auto local_world =
      ParseInt(lookup, "LOCAL_WORLD_SIZE", 1, kMaxRanks, env.world_size);
  if (!local_world.ok()) return local_world.status();
  env.local_world_size = static_cast<int>(*local_world);
  auto local = ParseInt(lookup, "LOCAL_RANK", 0, kMaxRanks, env.rank % env.local_world_size);
  if (!local.ok()) return local.status();
  env.local_rank = static_cast<int>(*local);
  auto node = ParseInt(lookup, "NODE_RANK", 0, kMaxRanks, 0);
  if (!node.ok()) return node.status();
  env.node_rank = static_cast<int>(*node);
  auto gen = ParseInt(lookup, "FRAMEWORM_GENERATION", 0,
                      std::numeric_limits<int64_t>::max(), 0);
  if (!gen.ok()) return gen.status();
  env.generation = *gen;
  env.coordinator = lookup("FRAMEWORM_COORDINATOR").value_or("");
  env.job_id = lookup("FRAMEWORM_JOB_ID").value_or("");
  env.resume_from = lookup("FRAMEWORM_RESUME_FROM").value_or("");
  env.checkpoint_dir = lookup("FRAMEWORM_CHECKPOINT_DIR").value_or("");
  env.memory_checkpoint_dir = lookup("FRAMEWORM_MEMORY_CHECKPOINT_DIR").value_or("");
  if (lookup("FRAMEWORM_MEMORY_CHECKPOINT_EVERY") != std::optional<std::string>("auto")) {
    auto every = ParseInt(lookup, "FRAMEWORM_MEMORY_CHECKPOINT_EVERY", 1,
                          kMaxMemoryCheckpointEvery, 0);
    if (!every.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(every.status().message(), " (auto or a number of steps)"));
    }
    env.memory_checkpoint_every = *every;
  }
  env.token = lookup("FRAMEWORM_TOKEN").value_or("");
  env.tls_dir = lookup("FRAMEWORM_TLS_DIR").value_or("");
  return env;
}

}  // namespace frameworm
