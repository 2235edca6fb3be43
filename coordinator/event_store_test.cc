// The events table of both Store implementations (store.h contract).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/memory_store.h"
#include "coordinator/sqlite_store.h"
#include "coordinator/test_dir.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

class EventStoreTest : public ::testing::TestWithParam<bool> {  // true: SQLite
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("events");
    Open();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)opens the store; a MemoryStore is kept (it has no disk).
  void Open() {
    if (!GetParam()) {
      if (!store_) store_ = std::make_unique<MemoryStore>();
      return;
    }
    store_.reset();
    auto opened = SqliteStore::Open(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = *std::move(opened);
  }
  static EventRow Row(int64_t seq, const std::string& job) {
    return EventRow{seq, job, 1000 + seq, "event-" + std::to_string(seq)};
  }
  std::vector<int64_t> Seqs(const std::optional<std::string>& job, int64_t after, int limit) {
    auto rows = store_->LoadEvents(job, after, limit);
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<int64_t> out;
    if (rows.ok())
      for (const EventRow& r : *rows) out.push_back(r.seq);
    return out;
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(EventStoreTest, EventsReadBackByJobAndAfterSeqWithALimit) {
  ASSERT_TRUE(store_->AddEvents({Row(1, "job-a"), Row(2, ""), Row(3, "job-b"), Row(4, "job-a")})
                  .ok());
  Open();
  EXPECT_EQ(Seqs("job-a", 0, 100), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(Seqs(std::nullopt, 0, 100), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(Seqs(std::nullopt, 1, 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Seqs("", 0, 100), (std::vector<int64_t>{2}));
  auto rows = store_->LoadEvents("job-b", 0, 10);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].unix_ms, 1003);
  EXPECT_EQ((*rows)[0].event, "event-3");
  auto max = store_->MaxEventSeq();
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(*max, 4);
}

TEST_P(EventStoreTest, TrimKeepsTheNewestOfEveryJobAndTheHighWaterMark) {
  std::vector<EventRow> rows;
  for (int64_t i = 1; i <= 10; ++i) rows.push_back(Row(i, i % 2 ? "job-a" : ""));
  rows.push_back(Row(11, "job-b"));
  ASSERT_TRUE(store_->AddEvents(rows).ok());
  ASSERT_TRUE(store_->TrimEvents(2).ok());
  EXPECT_EQ(Seqs(std::nullopt, 0, 100), (std::vector<int64_t>{7, 8, 9, 10, 11}));
  ASSERT_TRUE(store_->DeleteJob("job-b").ok());
  ASSERT_TRUE(store_->DeleteJob("job-a").ok());
  EXPECT_EQ(Seqs(std::nullopt, 0, 100), (std::vector<int64_t>{8, 10}));
  Open();
  auto max = store_->MaxEventSeq();  // deleted rows never give their seqs back
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(*max, 11);
}

TEST_P(EventStoreTest, TheNewestEventsComeOldestFirstWithoutTheOlderOnes) {
  std::vector<EventRow> rows;
  for (int64_t i = 1; i <= 30; ++i) rows.push_back(Row(i, i % 3 ? "job-a" : "job-b"));
  ASSERT_TRUE(store_->AddEvents(rows).ok());
  Open();
  auto newest = [&](const std::optional<std::string>& job, int limit) {
    auto got = store_->LoadNewestEvents(job, limit);
    EXPECT_TRUE(got.ok()) << got.status();
    std::vector<int64_t> out;
    if (got.ok())
      for (const EventRow& r : *got) out.push_back(r.seq);
    return out;
  };
  EXPECT_EQ(newest("job-b", 3), (std::vector<int64_t>{24, 27, 30}));
  EXPECT_EQ(newest("job-a", 4), (std::vector<int64_t>{25, 26, 28, 29}));
  EXPECT_EQ(newest(std::nullopt, 2), (std::vector<int64_t>{29, 30}));
  EXPECT_EQ(newest("job-b", 100).size(), 10u);  // fewer than the limit: all of them
  EXPECT_TRUE(newest("job-c", 5).empty());
  auto rows_b = store_->LoadNewestEvents("job-b", 1);
  ASSERT_TRUE(rows_b.ok());
  ASSERT_EQ(rows_b->size(), 1u);
  EXPECT_EQ((*rows_b)[0].event, "event-30");
  EXPECT_EQ((*rows_b)[0].unix_ms, 1030);
}

TEST_P(EventStoreTest, AnEmptyStoreHasNoEvents) {
  EXPECT_TRUE(Seqs(std::nullopt, 0, 10).empty());
  auto max = store_->MaxEventSeq();
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(*max, 0);
}

INSTANTIATE_TEST_SUITE_P(Stores, EventStoreTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Sqlite" : "Memory"; });

}  // namespace
}  // namespace frameworm::coordinator
