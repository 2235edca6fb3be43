#include "coordinator/checkpoint_copies.h"

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm::coordinator {
namespace fs = std::filesystem;

std::string Crc32Text(uint32_t crc) { return absl::StrFormat("crc32:%08x", crc); }

absl::Status CheckJobIdComponent(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 64 && id != "." && id != "..";
  for (char c : id) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job id '", id.substr(0, 80), "' is not 1-64 characters of [A-Za-z0-9_.-]"));
  }
  return absl::OkStatus();
}

std::string CheckpointCopies::FileOf(const std::string& job_id, int64_t step) const {
  return absl::StrCat(root_, "/", job_id, "/ckpt-", step, ".pt");
}

absl::StatusOr<std::unique_ptr<CheckpointCopies::Incoming>> CheckpointCopies::Begin(
    const std::string& job_id, int64_t step, int64_t total_bytes) const {
  if (absl::Status s = CheckJobIdComponent(job_id); !s.ok()) return s;
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint step must be >= 0, got ", step));
  }
  if (total_bytes < 0 || total_bytes > max_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint of ", total_bytes,
                                                   " bytes: the coordinator keeps at most ",
                                                   max_bytes_, " bytes per checkpoint"));
  }
  static std::atomic<uint64_t> counter{0};
  auto in = std::unique_ptr<Incoming>(new Incoming());
  in->final_ = FileOf(job_id, step);
  in->partial_ = absl::StrCat(in->final_, ".partial-", counter.fetch_add(1));
  in->expected_ = total_bytes;
  in->crc_ = crc32(0L, Z_NULL, 0);
  std::error_code ec;
  fs::create_directories(fs::path(in->final_).parent_path(), ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ",
                                            fs::path(in->final_).parent_path().string(), ": ",
                                            ec.message()));
  }
  in->file_ = std::fopen(in->partial_.c_str(), "wbx");
  if (in->file_ == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", in->partial_, ": ",
                                            std::strerror(errno)));
  }
  return in;
}

CheckpointCopies::Incoming::~Incoming() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) {
    std::error_code ec;
    fs::remove(partial_, ec);
  }
}

absl::Status CheckpointCopies::Incoming::Append(const std::string& data) {
  if (file_ == nullptr) return absl::FailedPreconditionError("upload already ended");
  if (static_cast<int64_t>(data.size()) > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint chunk of ", data.size(),
                                                   " bytes; at most ", kMaxChunkBytes));
  }
  if (received_ + static_cast<int64_t>(data.size()) > expected_) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint upload sent more than the ",
                                                   expected_, " bytes it declared"));
  }
  if (!data.empty() && std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
    return absl::InternalError(absl::StrCat("writing ", partial_, ": ", std::strerror(errno)));
  }
  crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(data.data()), data.size());
  received_ += static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::Status CheckpointCopies::Incoming::Commit(const std::string& checksum) {
  if (file_ == nullptr) return absl::FailedPreconditionError("upload already ended");
  if (received_ != expected_) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint upload ended after ", received_,
                                                   " of the ", expected_, " bytes it declared"));
  }
  if (checksum != Crc32Text(crc_)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint upload checksum '",
                                                   checksum.substr(0, 40), "' does not match ",
                                                   Crc32Text(crc_), " of the bytes received"));
  }
  const bool flushed = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!flushed) return absl::InternalError(absl::StrCat("flushing ", partial_, " failed"));
  std::error_code ec;
  fs::rename(partial_, final_, ec);
  if (ec) return absl::InternalError(absl::StrCat("renaming to ", final_, ": ", ec.message()));
  committed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointCopies::PathOf(const std::string& job_id,
                                                     int64_t step) const {
  if (absl::Status s = CheckJobIdComponent(job_id); !s.ok()) return s;
  const std::string f = FileOf(job_id, step);
  std::error_code ec;
  if (!fs::is_regular_file(f, ec)) {
    return absl::NotFoundError(absl::StrCat("the coordinator holds no copy of ", job_id,
                                            "'s checkpoint of step ", step));
  }
  return f;
}

void CheckpointCopies::Remove(const std::string& job_id, int64_t step) const {
  if (!CheckJobIdComponent(job_id).ok()) return;
  std::error_code ec;
  fs::remove(FileOf(job_id, step), ec);
}

void CheckpointCopies::RemoveJob(const std::string& job_id) const {
  if (!CheckJobIdComponent(job_id).ok()) return;
  std::error_code ec;
  fs::remove_all(fs::path(root_) / job_id, ec);
}

}  // namespace frameworm::coordinator
