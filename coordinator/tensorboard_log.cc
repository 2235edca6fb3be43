#include "coordinator/tensorboard_log.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

const std::array<uint32_t, 256>& Crc32cTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <typename T>
void LittleEndian(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64 Linux: little-endian
  out.append(b, sizeof(T));
}

void LengthDelimited(std::string& out, int field, const std::string& bytes) {
  Varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  Varint(out, bytes.size());
  out += bytes;
}

}  // namespace

uint32_t Crc32c(const std::string& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = Crc32cTable()[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(const std::string& data) {
  const uint32_t c = Crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string TfRecord(const std::string& payload) {
  std::string len;
  LittleEndian<uint64_t>(len, payload.size());
  std::string out = len;
  LittleEndian<uint32_t>(out, MaskedCrc32c(len));
  out += payload;
  LittleEndian<uint32_t>(out, MaskedCrc32c(payload));
  return out;
}

std::string ScalarEvent(double wall_time, int64_t step,
                        const std::vector<std::pair<std::string, float>>& scalars) {
  std::string e;
  Varint(e, (1 << 3) | 1);  // wall_time: double
  LittleEndian<double>(e, wall_time);
  Varint(e, 2 << 3);  // step: int64
  Varint(e, static_cast<uint64_t>(step));
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    LengthDelimited(v, 1, tag);  // Summary.Value.tag
    Varint(v, (2 << 3) | 5);     // Summary.Value.simple_value: float
    LittleEndian<float>(v, value);
    LengthDelimited(summary, 1, v);  // Summary.value
  }
  LengthDelimited(e, 5, summary);  // Event.summary
  return e;
}

std::string FileVersionEvent(double wall_time) {
  std::string e;
  Varint(e, (1 << 3) | 1);
  LittleEndian<double>(e, wall_time);
  LengthDelimited(e, 3, "brain.Event:2");  // Event.file_version
  return e;
}

std::string TensorBoardLog::Dir(const std::string& job_id) const {
  return (fs::path(root_) / job_id).string();
}

namespace {

// The record of a completed step (every rank reported); nullopt for a
// partial step or a row that does not parse.
std::optional<std::string> StepRecord(const MetricRow& row) {
  v1::AggregatedStep s;
  if (!s.ParseFromString(row.aggregate)) return std::nullopt;
  if (s.rank_step_seconds_size() == 0 || s.ranks_reported() < s.rank_step_seconds_size()) {
    return std::nullopt;  // its last rank has not reported yet
  }
  std::vector<std::pair<std::string, float>> scalars;
  std::map<std::string, double> mean(s.mean().begin(), s.mean().end());
  for (const auto& [name, v] : mean) scalars.emplace_back(name, static_cast<float>(v));
  double slowest = 0;
  for (double t : s.rank_step_seconds()) slowest = std::max(slowest, t);
  scalars.emplace_back("step_seconds", static_cast<float>(slowest));
  if (slowest > 0) {
    scalars.emplace_back("samples_per_second", static_cast<float>(s.samples() / slowest));
  }
  return TfRecord(ScalarEvent(s.unix_ms() / 1000.0, s.step(), scalars));
}

std::string EventFileName(int64_t stamp) {
  return absl::StrCat("events.out.tfevents.", stamp, ".frameworm");
}

}  // namespace

void TensorBoardLog::Append(const std::vector<MetricRow>& rows) {
  std::map<std::string, std::string> records;  // job -> bytes to append
  for (const MetricRow& row : rows) {
    if (std::optional<std::string> r = StepRecord(row)) records[row.job_id] += *r;
  }
  if (records.empty()) return;
  absl::MutexLock l(&mu_);
  for (const auto& [job, bytes] : records) {
    auto it = files_.find(job);
    std::string header;
    if (it == files_.end()) {
      std::error_code ec;
      fs::create_directories(Dir(job), ec);
      const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
      File file;
      file.stamp = static_cast<int64_t>(now);
      file.path = (fs::path(Dir(job)) / EventFileName(file.stamp)).string();
      it = files_.emplace(job, file).first;
      header = TfRecord(FileVersionEvent(now));
    } else if (store_ != nullptr &&
               it->second.bytes - it->second.compacted + static_cast<int64_t>(bytes.size()) >
                   max_job_bytes_ &&
               Compact(job, it->second)) {
      continue;  // the rows were committed: the new file has them
    }
    std::ofstream f(it->second.path, std::ios::binary | std::ios::app);
    f << header << bytes;
    f.flush();
    if (f) {
      it->second.bytes += static_cast<int64_t>(header.size() + bytes.size());
    } else if (failed_.insert(job).second) {
      std::fprintf(stderr, "coordinator: job %s: cannot write TensorBoard events to %s\n",
                   job.c_str(), it->second.path.c_str());
    }
  }
}

bool TensorBoardLog::Compact(const std::string& job, File& file) {
  absl::StatusOr<std::vector<MetricRow>> rows = store_->LoadMetrics(job);
  if (!rows.ok()) {
    if (failed_.insert(job).second) {
      std::fprintf(stderr, "coordinator: job %s: cannot read its metrics to compact %s: %s\n",
                   job.c_str(), file.path.c_str(), std::string(rows.status().message()).c_str());
    }
    return false;
  }
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const int64_t stamp = std::max(static_cast<int64_t>(now), file.stamp + 1);
  std::string data = TfRecord(FileVersionEvent(now));
  for (const MetricRow& row : *rows) {
    if (std::optional<std::string> r = StepRecord(row)) data += *r;
  }
  const fs::path dir = Dir(job);
  const fs::path tmp = dir / ".compacting";
  const fs::path path = dir / EventFileName(stamp);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << data;
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      if (failed_.insert(job).second) {
        std::fprintf(stderr, "coordinator: job %s: cannot write TensorBoard events to %s\n",
                     job.c_str(), tmp.c_str());
      }
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return false;
  }
  // Every other event file of the job: the one replaced, and those of
  // earlier coordinator runs.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->path() != path && name.rfind("events.out.tfevents.", 0) == 0) {
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
  file = {path.string(), stamp, static_cast<int64_t>(data.size()),
          static_cast<int64_t>(data.size())};
  return true;
}

void TensorBoardLog::RemoveJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  files_.erase(job_id);
  failed_.erase(job_id);
  std::error_code ec;
  fs::remove_all(Dir(job_id), ec);
}

}  // namespace frameworm::coordinator
