#include "coordinator/paging.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

std::vector<int> Numbers(int n) {
  std::vector<int> v;
  for (int i = 1; i <= n; ++i) v.push_back(i * 10);
  return v;
}

TEST(PagingTest, PagesFollowTheirTokensToTheEnd) {
  auto key = [](int x) { return NumericPageKey(x); };
  std::vector<int> seen;
  std::string token;
  int pages = 0;
  do {
    auto page = TakePage(Numbers(7), 3, token, 2, 5, key);
    ASSERT_TRUE(page.ok()) << page.status();
    seen.insert(seen.end(), page->items.begin(), page->items.end());
    token = page->next_token;
    ++pages;
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, Numbers(7));
  // 0: the default size; an exact fit ends with an empty token.
  auto first = TakePage(Numbers(7), 0, "", 2, 5, key);
  EXPECT_EQ(first->items.size(), 2u);
  EXPECT_EQ(first->next_token, NumericPageKey(20));
  auto all = TakePage(Numbers(5), 5, "", 2, 5, key);
  EXPECT_EQ(all->items.size(), 5u);
  EXPECT_EQ(all->next_token, "");
  // Numeric keys order as numbers (100 after 99).
  EXPECT_LT(NumericPageKey(99), NumericPageKey(100));
  // A token past everything: an empty last page.
  auto none = TakePage(Numbers(3), 2, NumericPageKey(1000), 2, 5, key);
  EXPECT_TRUE(none->items.empty());
  EXPECT_EQ(none->next_token, "");
}

TEST(PagingTest, SizesOutsideTheLimitAreRefused) {
  auto key = [](int x) { return NumericPageKey(x); };
  EXPECT_EQ(TakePage(Numbers(3), 6, "", 2, 5, key).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TakePage(Numbers(3), -1, "", 2, 5, key).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frameworm::coordinator
