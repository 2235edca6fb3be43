#include "common/token.h"

#include <set>

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(TokenTest, TokensAre64HexDigitsAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string t = NewToken();
    ASSERT_EQ(t.size(), 64u);
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(TokenTest, EqualOnlyWhenEqual) {
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "ab"));
  EXPECT_FALSE(TokensEqual("", "a"));
  EXPECT_TRUE(TokensEqual("", ""));
}

}  // namespace
}  // namespace frameworm
