// A server-streaming call that sends one file in order, in chunks of at
// most kMaxChunkBytes (common/received_file.h): the coordinator's
// DownloadCheckpoint and GetCheckpoint, a worker's FetchCheckpoint. The
// first chunk carries total_bytes (the file's size when the call started)
// and whatever else `head` holds; the receiver checks size and checksum
// (ReceivedFile). A range [offset, offset + length) of the file may be
// asked for (length 0: to the end; total_bytes stays the file's size); one
// outside the file ends the call with OUT_OF_RANGE naming the numbers.
//
// `Chunk` is a message with set_total_bytes(int64) and mutable_data().
// Errors end the call: INTERNAL "cannot read <what>" when the file cannot be
// opened or read. A client that goes away ends it quietly. With a `reaper`
// (rpc/idle_call_reaper.h), a client that stops reading (a chunk not taken
// for the reaper's idle time) has its call cancelled: a stream cannot pin
// its chunk's buffer and the file's descriptor for ever.
// Thread safety: gRPC's reactor rules (one write in flight).
#ifndef FRAMEWORM_RPC_FILE_STREAM_H_
#define FRAMEWORM_RPC_FILE_STREAM_H_

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/received_file.h"
#include "rpc/idle_call_reaper.h"
#include "grpcpp/grpcpp.h"

namespace frameworm {

// Clears every field of `chunk` but its data, whose buffer stays: the next
// chunk's resize then reuses it instead of allocating and zero-filling a
// megabyte that the read overwrites anyway.
template <typename Chunk>
void ClearAllButData(Chunk& chunk) {
  std::string keep = std::move(*chunk.mutable_data());
  chunk.Clear();
  *chunk.mutable_data() = std::move(keep);
}

template <typename Chunk>
class FileSendReactor final : public grpc::ServerWriteReactor<Chunk> {
 public:
  // `what` names the file in errors without showing its path; `head`'s
  // fields other than the data go out with the first chunk. `reaper` (may
  // be null: never cut) must outlive the call; `ctx` is the call's.
  // `on_done` (may be null) runs once the call is over, whatever its end.
  FileSendReactor(grpc::CallbackServerContext* ctx, IdleCallReaper* reaper,
                  const std::string& path, const std::string& what, Chunk head = Chunk(),
                  int64_t offset = 0, int64_t length = 0,
                  std::function<void()> on_done = nullptr)
      : ctx_(ctx),
        reaper_(reaper),
        what_(what),
        on_done_(std::move(on_done)),
        chunk_(std::move(head)) {
    in_.open(path, std::ios::binary);
    std::error_code ec;
    const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (!in_ || ec) {
      this->Finish(grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("cannot read ", what_)));
      return;
    }
    if (offset < 0 || length < 0 || offset > size || length > size - offset) {
      this->Finish(grpc::Status(
          grpc::StatusCode::OUT_OF_RANGE,
          absl::StrCat("bytes [", offset, ", ", offset, " + ", length, ") are outside ", what_,
                       " of ", size, " bytes")));
      return;
    }
    if (offset > 0 && !in_.seekg(offset)) {
      this->Finish(grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("cannot read ", what_)));
      return;
    }
    sent_ = offset;
    total_ = length > 0 ? offset + length : size;  // where this call stops
    chunk_.set_total_bytes(size);
    if (reaper_ != nullptr) reaper_->Seen(ctx_);
    Next();
  }
  void OnWriteDone(bool ok) override {
    // The client went away, or stopped reading and the reaper cut it.
    if (!ok) return this->Finish(grpc::Status::OK);
    if (reaper_ != nullptr) reaper_->Seen(ctx_);
    ClearAllButData(chunk_);
    Next();
  }
  void OnDone() override {
    if (reaper_ != nullptr) reaper_->Gone(ctx_);
    if (on_done_) on_done_();
    delete this;
  }

 private:
  void Next() {
    std::string* data = chunk_.mutable_data();
    data->resize(static_cast<size_t>(std::min<int64_t>(kMaxChunkBytes, total_ - sent_)));
    if (data->empty()) {
      if (!first_) return this->Finish(grpc::Status::OK);
    } else if (!in_.read(data->data(), static_cast<std::streamsize>(data->size()))) {
      return this->Finish(
          grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("reading ", what_, " failed")));
    }
    sent_ += static_cast<int64_t>(data->size());
    first_ = false;
    this->StartWrite(&chunk_);
  }

  grpc::CallbackServerContext* const ctx_;
  IdleCallReaper* const reaper_;
  const std::string what_;
  const std::function<void()> on_done_;
  std::ifstream in_;
  int64_t total_ = 0, sent_ = 0;  // the end of what is sent, and where it is
  bool first_ = true;
  Chunk chunk_;  // declared last: initialized after the others
};

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_FILE_STREAM_H_
