// TensorBoard files as records on disk: CRC-32C against its known value,
// record framing read back, complete steps only. (The tensorboard Python
// package reads a real job's files in tests/e2e/cluster_test.cc.)
#include "coordinator/tensorboard_log.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/memory_store.h"
#include "coordinator/test_dir.h"
#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

MetricRow Row(const std::string& job, int64_t step, int reported, int world, double loss) {
  v1::AggregatedStep s;
  s.set_step(step);
  s.set_ranks_reported(reported);
  s.set_samples(64);
  s.set_unix_ms(1000 * step);
  (*s.mutable_mean())["loss"] = loss;
  for (int r = 0; r < world; ++r) s.add_rank_step_seconds(0.5 * (r + 1));
  MetricRow row{job, step, ""};
  s.SerializeToString(&row.aggregate);
  return row;
}

// The payloads of every record in `path`, each record's CRCs checked.
std::vector<std::string> ReadRecords(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream all;
  all << f.rdbuf();
  const std::string data = all.str();
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 12 <= data.size()) {
    uint64_t len = 0;
    uint32_t len_crc = 0, crc = 0;
    std::memcpy(&len, data.data() + at, 8);
    std::memcpy(&len_crc, data.data() + at + 8, 4);
    EXPECT_EQ(len_crc, MaskedCrc32c(data.substr(at, 8)));
    const std::string payload = data.substr(at + 12, len);
    std::memcpy(&crc, data.data() + at + 12 + len, 4);
    EXPECT_EQ(crc, MaskedCrc32c(payload));
    out.push_back(payload);
    at += 12 + len + 4;
  }
  EXPECT_EQ(at, data.size()) << "a torn record at the end";
  return out;
}

TEST(TensorBoardLog, Crc32cIsCastagnoli) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(TensorBoardLog, CompletedStepsBecomeRecordsAfterTheFileVersion) {
  const std::string root = FreshTestDir("tb");
  TensorBoardLog tb(root);
  tb.Append({Row("job-1", 1, 2, 2, 2.5), Row("job-1", 2, 1, 2, 9.0)});  // step 2 partial
  tb.Append({Row("job-1", 2, 2, 2, 1.5)});
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(tb.Dir("job-1"))) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::vector<std::string> records = ReadRecords(files[0].string());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  EXPECT_EQ(records[1], ScalarEvent(1.0, 1, {{"loss", 2.5f}, {"step_seconds", 1.0f},
                                             {"samples_per_second", 64.0f}}));
  EXPECT_EQ(records[2], ScalarEvent(2.0, 2, {{"loss", 1.5f}, {"step_seconds", 1.0f},
                                             {"samples_per_second", 64.0f}}));
  tb.RemoveJob("job-1");
  EXPECT_FALSE(fs::exists(tb.Dir("job-1")));
  fs::remove_all(root);
}

TEST(TensorBoardLog, AnUnwritableDirectoryLosesOnlyTheFiles) {
  const std::string root = FreshTestDir("tb-ro");
  fs::create_directories(root);
  std::ofstream(root + "/job-1") << "a file where the directory should be";
  TensorBoardLog tb(root);
  tb.Append({Row("job-1", 1, 1, 1, 1.0)});  // logged, not thrown
  tb.Append({Row("job-1", 2, 1, 1, 1.0)});
  EXPECT_TRUE(fs::is_regular_file(root + "/job-1"));
  fs::remove_all(root);
}

// The step of a scalar event: field 2 (varint), right after wall_time
// (field 1, a fixed64: tag 0x09 and 8 bytes).
int64_t StepOf(const std::string& event) {
  if (event.size() < 11 || event[0] != 0x09 || event[9] != 0x10) return -1;
  int64_t v = 0;
  for (size_t i = 10, shift = 0; i < event.size(); ++i, shift += 7) {
    v |= static_cast<int64_t>(event[i] & 0x7f) << shift;
    if (!(event[i] & 0x80)) break;
  }
  return v;
}

// The wall_time of an event (field 1, a fixed64 right at the start).
double StartWallTime(const std::string& event) {
  double t = 0;
  if (event.size() >= 9) std::memcpy(&t, event.data() + 1, 8);
  return t;
}

std::vector<fs::path> EventFiles(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  return files;
}

// A long job's directory stays bounded: past max_job_bytes of appended
// records the file is rewritten from the store's (thinned) history, and the
// event files of earlier coordinator runs go with the replaced one.
TEST(TensorBoardLog, ALongJobsFileIsCompactedFromTheThinnedStore) {
  const std::string root = FreshTestDir("tb-compact");
  MemoryStore store;
  constexpr int64_t kCap = 4000;  // about 60 records
  TensorBoardLog tb(root, &store, kCap);
  fs::create_directories(tb.Dir("job-1"));
  const std::string earlier = tb.Dir("job-1") + "/events.out.tfevents.1.frameworm";
  std::ofstream(earlier) << "an earlier run's file";
  int64_t largest = 0;
  for (int64_t step = 1; step <= 1000; ++step) {
    const MetricRow row = Row("job-1", step, 1, 1, 1.0 / step);
    ASSERT_TRUE(store.PutMetrics({row}).ok());
    tb.Append({row});
    // The coordinator's thinning (MetricAggregator::Thin): past 100 stored
    // steps, every other one goes, the newest kept.
    if (std::vector<MetricRow> kept = *store.LoadMetrics("job-1"); kept.size() > 100) {
      std::vector<int64_t> thin;
      for (size_t i = kept.size() % 2; i + 1 < kept.size(); i += 2) thin.push_back(kept[i].step);
      ASSERT_TRUE(store.DeleteMetrics("job-1", thin).ok());
    }
    for (const fs::path& f : EventFiles(tb.Dir("job-1"))) {
      largest = std::max<int64_t>(largest, static_cast<int64_t>(fs::file_size(f)));
    }
  }
  const std::vector<fs::path> files = EventFiles(tb.Dir("job-1"));
  ASSERT_EQ(files.size(), 1u);
  EXPECT_FALSE(fs::exists(earlier));
  const std::vector<std::string> records = ReadRecords(files[0].string());
  ASSERT_GT(records.size(), 2u);
  size_t record = 0;  // the largest record, framing included
  for (const std::string& r : records) record = std::max(record, r.size() + 16);
  // At most the cap plus one compacted history of at most 101 steps.
  EXPECT_LE(largest, kCap + static_cast<int64_t>(record * 102));
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  EXPECT_EQ(records[1], SessionStartEvent(StartWallTime(records[1]), 0))
      << "a compacted file tells TensorBoard to drop what it showed";
  std::vector<int64_t> steps;
  for (size_t i = 2; i < records.size(); ++i) steps.push_back(StepOf(records[i]));
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()));
  EXPECT_EQ(steps.back(), 1000);
  EXPECT_EQ(std::count(steps.begin(), steps.end(), 2), 0) << "step 2 was thinned";
  EXPECT_LT(steps.size(), 101u + kCap / 40);
  EXPECT_GT(steps.back() - steps.front(), 500) << "the history spans the run";
  fs::remove_all(root);
}

// A store that cannot be read leaves the file as it is, growing: nothing
// appended is lost; the compaction is tried again after another
// max_job_bytes, and works once the store reads again.
TEST(TensorBoardLog, AStoreThatCannotBeReadLeavesTheFileGrowing) {
  const std::string root = FreshTestDir("tb-noread");
  MemoryStore store;
  TensorBoardLog tb(root, &store, 1000);
  store.FailMetricReads(absl::UnavailableError("disk gone"));
  for (int64_t step = 1; step <= 60; ++step) {
    const MetricRow row = Row("job-1", step, 1, 1, 1.0);
    ASSERT_TRUE(store.PutMetrics({row}).ok());
    tb.Append({row});
  }
  std::vector<fs::path> files = EventFiles(tb.Dir("job-1"));
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(ReadRecords(files[0].string()).size(), 61u);  // every step, after the version
  store.FailMetricReads(absl::OkStatus());
  for (int64_t step = 61; step <= 90; ++step) {
    const MetricRow row = Row("job-1", step, 1, 1, 1.0);
    ASSERT_TRUE(store.PutMetrics({row}).ok());
    tb.Append({row});
  }
  files = EventFiles(tb.Dir("job-1"));
  ASSERT_EQ(files.size(), 1u);
  const std::vector<std::string> records = ReadRecords(files[0].string());
  ASSERT_EQ(records.size(), 92u);  // version, START (compacted), steps 1-90
  EXPECT_EQ(records[1], SessionStartEvent(StartWallTime(records[1]), 0));
  for (size_t i = 2; i < records.size(); ++i) EXPECT_EQ(StepOf(records[i]), int64_t(i) - 1);
  fs::remove_all(root);
}

// A generation that re-runs steps after a restart: before the first step
// written again, a SessionLog START at that step, so TensorBoard drops the
// old points from it on and shows the re-run (the tensorboard package's
// EventAccumulator, given such a file, keeps steps 1, 2 and the new 3, 4).
TEST(TensorBoardLog, AStepWrittenAgainIsPrecededByASessionStart) {
  const std::string root = FreshTestDir("tb-rerun");
  TensorBoardLog tb(root);
  tb.Append({Row("job-1", 1, 1, 1, 3.0), Row("job-1", 2, 1, 1, 2.0), Row("job-1", 3, 1, 1, 1.0)});
  tb.Append({Row("job-1", 3, 1, 1, 1.5), Row("job-1", 4, 1, 1, 1.2)});  // resumed from step 2
  const std::vector<fs::path> files = EventFiles(tb.Dir("job-1"));
  ASSERT_EQ(files.size(), 1u);
  const std::vector<std::string> records = ReadRecords(files[0].string());
  ASSERT_EQ(records.size(), 7u);
  EXPECT_EQ(StepOf(records[3]), 3);
  EXPECT_EQ(records[4], SessionStartEvent(3.0, 3));
  EXPECT_EQ(StepOf(records[5]), 3);
  EXPECT_EQ(StepOf(records[6]), 4);
  fs::remove_all(root);
}

// A restarted coordinator (a new TensorBoardLog on the same directories)
// replaces the event files of its earlier runs with one compacted file at
// its first append, named later than them, so restarts do not pile up
// files.
TEST(TensorBoardLog, ARestartedCoordinatorCompactsTheEarlierRunsFiles) {
  const std::string root = FreshTestDir("tb-restart");
  MemoryStore store;
  const std::string dir = root + "/job-1";
  fs::create_directories(dir);
  const int64_t future = absl::ToUnixSeconds(absl::Now()) + 1000;  // a clock that went back
  std::ofstream(absl::StrCat(dir, "/events.out.tfevents.", future, ".frameworm")) << "x";
  std::ofstream(dir + "/events.out.tfevents.100.frameworm") << "y";
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(store.PutMetrics({Row("job-1", step, 1, 1, 1.0)}).ok());
  }
  TensorBoardLog tb(root, &store, 1 << 20);
  tb.Append({Row("job-1", 3, 1, 1, 1.0)});
  std::vector<fs::path> files = EventFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string(),
            absl::StrCat("events.out.tfevents.", future + 1, ".frameworm"));
  std::vector<std::string> records = ReadRecords(files[0].string());
  ASSERT_EQ(records.size(), 5u);  // version, START, steps 1-3
  EXPECT_EQ(StepOf(records[4]), 3);
  // The next append goes to that file.
  ASSERT_TRUE(store.PutMetrics({Row("job-1", 4, 1, 1, 1.0)}).ok());
  tb.Append({Row("job-1", 4, 1, 1, 1.0)});
  files = EventFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  records = ReadRecords(files[0].string());
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(StepOf(records[5]), 4);
  fs::remove_all(root);
}

}  // namespace
}  // namespace frameworm::coordinator
