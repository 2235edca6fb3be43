#include "coordinator/paging.h"

#include <string>
#include <vector>

#include "frameworm/v1/common.pb.h"
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

// Large items make shorter pages: the bytes of a page stay under the
// bound (a page holds at least one item), and following the tokens still
// gives every item once.
TEST(PagingTest, LargeItemsMakeShorterPages) {
  std::vector<v1::JobSpec> specs;
  for (int i = 0; i < 10; ++i) {
    v1::JobSpec s;
    s.set_name(NumericPageKey(i));
    s.add_entrypoint(std::string(300 << 10, 'x'));  // ~300 KiB each
    specs.push_back(s);
  }
  auto key = [](const v1::JobSpec& s) { return s.name(); };
  std::string token;
  std::vector<std::string> seen;
  int pages = 0;
  do {
    auto page = TakePage(specs, 0, token, 500, 1000, key, /*max_bytes=*/1 << 20);
    ASSERT_TRUE(page.ok());
    size_t bytes = 0;
    for (const auto& s : page->items) {
      bytes += s.ByteSizeLong();
      seen.push_back(s.name());
    }
    EXPECT_LE(bytes, size_t{1} << 20);
    EXPECT_GE(page->items.size(), 1u);
    token = page->next_token;
    ++pages;
  } while (!token.empty() && pages < 20);
  EXPECT_EQ(pages, 4);  // 3 + 3 + 3 + 1
  ASSERT_EQ(seen.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seen[i], NumericPageKey(i));
  // One item over the bound still makes a page of its own.
  auto one = TakePage(specs, 0, "", 500, 1000, key, /*max_bytes=*/1000);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->items.size(), 1u);
  EXPECT_EQ(one->next_token, NumericPageKey(0));
}

// ListEvents' pages: within the byte bound (at least one event), filtered
// events advance the cursor, and following it sees every visible event
// once.
TEST(PagingTest, EventPagesAreBoundedAndTheirCursorSkipsNothing) {
  std::vector<v1::Event> all;
  for (int i = 1; i <= 40; ++i) {
    v1::Event& e = all.emplace_back();
    e.set_seq(i);
    e.set_job_id(i % 3 == 0 ? "hidden" : "mine");
    e.set_message(std::string(i == 7 ? 5000 : 100, 'x'));
  }
  auto visible = [](const v1::Event& e) { return e.job_id() != "hidden"; };
  std::vector<int64_t> seen;
  int64_t after = 0;
  int pages = 0;
  for (; pages < 100; ++pages) {
    std::vector<v1::Event> rest;
    for (const v1::Event& e : all) {
      if (e.seq() > after) rest.push_back(e);
    }
    auto [page, next] = TakeEventPage(rest, after, visible, /*max_bytes=*/1000);
    if (page.empty()) {
      EXPECT_EQ(next, 40) << "the hidden tail moves the cursor to the end";
      break;
    }
    size_t bytes = 0;
    for (const v1::Event& e : page) {
      seen.push_back(e.seq());
      bytes += e.ByteSizeLong();
    }
    EXPECT_TRUE(page.size() == 1 || bytes <= 1000) << bytes;
    EXPECT_GE(next, page.back().seq());
    after = next;
  }
  std::vector<int64_t> want;
  for (int i = 1; i <= 40; ++i) {
    if (i % 3 != 0) want.push_back(i);
  }
  EXPECT_EQ(seen, want);
  EXPECT_GT(pages, 3);
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
