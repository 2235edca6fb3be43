// TensorBoard files as records on disk: CRC-32C against its known value,
// record framing read back, complete steps only. (The tensorboard Python
// package reads a real job's files in tests/e2e/cluster_test.cc.)
#include "coordinator/tensorboard_log.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace
}  // namespace frameworm::coordinator
