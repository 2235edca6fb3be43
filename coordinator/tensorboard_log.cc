#include "coordinator/tensorboard_log.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
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

namespace {

// An Event's wall_time (a double) and step (an int64): how every event
// with a step starts.
std::string EventAt(double wall_time, int64_t step) {
  std::string e;
  Varint(e, (1 << 3) | 1);
  LittleEndian<double>(e, wall_time);
  Varint(e, 2 << 3);
  Varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

std::string ScalarEvent(double wall_time, int64_t step,
                        const std::vector<std::pair<std::string, float>>& scalars) {
  std::string e = EventAt(wall_time, step);
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

std::string SessionStartEvent(double wall_time, int64_t step) {
  std::string e = EventAt(wall_time, step);
  std::string log;
  Varint(log, 1 << 3);  // SessionLog.status
  Varint(log, 1);       // START
  LengthDelimited(e, 7, log);  // Event.session_log
  return e;
}

std::string TensorBoardLog::Dir(const std::string& job_id) const {
  return (fs::path(root_) / job_id).string();
}

namespace {

struct StepRecordOf {
  int64_t step = 0;
  double wall_time = 0;
  std::string record;
};

// The record of a completed step (every rank reported); nullopt for a
// partial step or a row that does not parse.
std::optional<StepRecordOf> StepRecord(const MetricRow& row) {
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
  const double wall = s.unix_ms() / 1000.0;
  return StepRecordOf{s.step(), wall, TfRecord(ScalarEvent(wall, s.step(), scalars))};
}

constexpr char kEventPrefix[] = "events.out.tfevents.";

std::string EventFileName(int64_t stamp) {
  return absl::StrCat(kEventPrefix, stamp, ".frameworm");
}

// The event files in `dir`, and (when `newest` is given) the largest
// Unix-seconds stamp in their names (0 when none has one).
std::vector<fs::path> EventFilesIn(const fs::path& dir, int64_t* newest = nullptr) {
  std::vector<fs::path> out;
  int64_t unused = 0;
  if (newest == nullptr) newest = &unused;
  *newest = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kEventPrefix, 0) != 0) continue;
    out.push_back(it->path());
    const std::string rest = name.substr(sizeof(kEventPrefix) - 1);
    int64_t stamp = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &stamp)) *newest = std::max(*newest, stamp);
  }
  return out;
}

double Now() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

}  // namespace

void TensorBoardLog::Append(const std::vector<MetricRow>& rows) {
  std::map<std::string, std::vector<StepRecordOf>> records;  // by job, in step order
  for (const MetricRow& row : rows) {
    if (std::optional<StepRecordOf> r = StepRecord(row)) records[row.job_id].push_back(*r);
  }
  if (records.empty()) return;
  absl::MutexLock l(&mu_);
  for (const auto& [job, steps] : records) {
    auto it = files_.find(job);
    if (it == files_.end()) {
      std::error_code ec;
      fs::create_directories(Dir(job), ec);
      File file;
      const std::vector<fs::path> earlier = EventFilesIn(Dir(job), &file.stamp);
      // Files of an earlier coordinator run: one compacted file replaces
      // them (it holds these rows: they were committed).
      if (!earlier.empty() && store_ != nullptr && Compact(job, file)) {
        files_.emplace(job, file);
        continue;
      }
      const double now = Now();
      file.stamp = std::max(static_cast<int64_t>(now), file.stamp + (earlier.empty() ? 0 : 1));
      file.path = (fs::path(Dir(job)) / EventFileName(file.stamp)).string();
      const std::string version = TfRecord(FileVersionEvent(now));
      if (!Write(job, file.path, version, std::ios::trunc)) continue;
      file.bytes = static_cast<int64_t>(version.size());
      it = files_.emplace(job, file).first;
    }
    File& file = it->second;
    std::string bytes;
    int64_t last = file.last_step;
    for (const StepRecordOf& r : steps) {
      // A step again (a generation re-running steps after a restart):
      // TensorBoard drops what it showed from that step on.
      if (r.step <= last) bytes += TfRecord(SessionStartEvent(r.wall_time, r.step));
      bytes += r.record;
      last = r.step;
    }
    if (store_ != nullptr &&
        file.bytes - file.compacted + static_cast<int64_t>(bytes.size()) > max_job_bytes_) {
      if (Compact(job, file)) continue;  // the rows were committed: the new file has them
      file.compacted = file.bytes;  // tried again after another max_job_bytes
    }
    if (Write(job, file.path, bytes, std::ios::app)) {
      file.bytes += static_cast<int64_t>(bytes.size());
      file.last_step = last;
    }
  }
}

bool TensorBoardLog::Write(const std::string& job, const std::string& path,
                           const std::string& bytes, std::ios::openmode mode) {
  std::ofstream f(path, std::ios::binary | mode);
  f << bytes;
  f.flush();
  if (f) return true;
  if (failed_.insert(job).second) {
    std::fprintf(stderr, "coordinator: job %s: cannot write TensorBoard events to %s\n",
                 job.c_str(), path.c_str());
  }
  return false;
}

bool TensorBoardLog::Compact(const std::string& job, File& file) {
  absl::StatusOr<std::vector<MetricRow>> rows = store_->LoadMetrics(job);
  if (!rows.ok()) {
    if (failed_.insert(job).second) {
      std::fprintf(stderr, "coordinator: job %s: cannot read its metrics to compact its "
                   "TensorBoard events: %s\n",
                   job.c_str(), std::string(rows.status().message()).c_str());
    }
    return false;
  }
  const double now = Now();
  const int64_t stamp = std::max(static_cast<int64_t>(now), file.stamp + 1);
  // The version, then START at step 0: a TensorBoard that showed the old
  // file drops all of it and shows this history instead.
  std::string data = TfRecord(FileVersionEvent(now)) + TfRecord(SessionStartEvent(now, 0));
  int64_t last = 0;
  for (const MetricRow& row : *rows) {
    if (std::optional<StepRecordOf> r = StepRecord(row)) {
      data += r->record;
      last = r->step;
    }
  }
  const fs::path dir = Dir(job);
  const fs::path tmp = dir / ".compacting";
  const fs::path path = dir / EventFileName(stamp);
  if (!Write(job, tmp.string(), data, std::ios::trunc)) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return false;
  }
  // Every other event file of the job: the one replaced, and those of
  // earlier coordinator runs.
  for (const fs::path& old : EventFilesIn(dir)) {
    if (old != path) fs::remove(old, ec);
  }
  const int64_t size = static_cast<int64_t>(data.size());
  file = {path.string(), stamp, size, size, last};
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
