#include "common/closest_match.h"

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(ClosestMatchTest, SuggestsOnlyNearNames) {
  const std::vector<std::string> c = {"nproc_per_node", "nodes", "backend"};
  EXPECT_EQ(ClosestMatch("nprocs_per_node", c), "nproc_per_node");
  EXPECT_EQ(ClosestMatch("BACKEND", c), "backend");
  EXPECT_EQ(ClosestMatch("zzzzzzzz", c), "");
  EXPECT_EQ(ClosestMatch("x", {}), "");
}

}  // namespace
}  // namespace frameworm
