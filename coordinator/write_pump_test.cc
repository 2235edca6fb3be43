// WritePump's contract on a fake reactor base (no gRPC server, no threads):
// the test plays gRPC by calling OnWriteDone / OnCancel.
#include "coordinator/write_pump.h"

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

// What WritePump needs of a gRPC reactor; records the calls.
class FakeStream {
 public:
  virtual ~FakeStream() = default;
  virtual void OnWriteDone(bool) {}
  virtual void OnCancel() {}
  void StartWrite(const std::string* m) { written.push_back(*m); }
  void Finish(grpc::Status s) { finished.push_back(s.error_code()); }

  std::vector<std::string> written;
  std::vector<grpc::StatusCode> finished;
};

// Writes queued strings; ends with `end` once the queue is empty.
class QueueStream final : public WritePump<FakeStream, std::string> {
 public:
  void Push(std::string s) {
    {
      absl::MutexLock l(&mu_);
      items_.push_back(std::move(s));
    }
    Poke();
  }
  void End(grpc::Status s) {
    {
      absl::MutexLock l(&mu_);
      end_ = std::move(s);
    }
    Poke();
  }
  int asked() {
    absl::MutexLock l(&mu_);
    return asked_;
  }

 private:
  Next NextLocked(std::string* out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++asked_;
    if (items_.empty()) return end_ ? Finish(*end_) : Idle();
    *out = std::move(items_.front());
    items_.pop_front();
    return Write();
  }
  std::deque<std::string> items_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> end_ ABSL_GUARDED_BY(mu_);
  int asked_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(WritePumpTest, OneWriteInFlightAndPokesDuringAWriteAreNotLost) {
  QueueStream s;
  s.Push("a");
  s.Push("b");  // a is in flight: b waits
  EXPECT_EQ(s.written, std::vector<std::string>{"a"});
  s.OnWriteDone(true);
  EXPECT_EQ(s.written, (std::vector<std::string>{"a", "b"}));
  s.OnWriteDone(true);  // asks again: nothing, idle
  s.Poke();             // still nothing
  EXPECT_EQ(s.written.size(), 2u);
  s.Push("c");
  EXPECT_EQ(s.written.back(), "c");
  EXPECT_TRUE(s.finished.empty());
}

TEST(WritePumpTest, FinishWaitsForTheWriteInFlightAndHappensOnce) {
  QueueStream s;
  s.Push("a");
  s.Push("b");
  s.RequestFinish(grpc::Status(grpc::ABORTED, "x"));
  s.RequestFinish(grpc::Status(grpc::INTERNAL, "y"));  // the first wins
  EXPECT_TRUE(s.finished.empty());  // a is still being written
  s.OnWriteDone(true);
  EXPECT_EQ(s.finished, std::vector<grpc::StatusCode>{grpc::ABORTED});
  EXPECT_EQ(s.written, std::vector<std::string>{"a"});  // b never goes
  s.Push("c");
  s.RequestFinish(grpc::Status::OK);
  s.OnCancel();
  EXPECT_EQ(s.written.size(), 1u);
  EXPECT_EQ(s.finished.size(), 1u);
}

TEST(WritePumpTest, FailedWriteEndsTheStreamOk) {
  QueueStream s;
  s.Push("a");
  s.Push("b");
  s.RequestFinish(grpc::Status(grpc::ABORTED, "x"));
  s.OnWriteDone(false);  // the peer is gone: OK, not the pending status
  EXPECT_EQ(s.finished, std::vector<grpc::StatusCode>{grpc::OK});
  EXPECT_EQ(s.written.size(), 1u);
}

TEST(WritePumpTest, CancelEndsNowWhenIdleOrAfterTheWrite) {
  QueueStream idle;
  idle.OnCancel();
  EXPECT_EQ(idle.finished, std::vector<grpc::StatusCode>{grpc::CANCELLED});
  QueueStream busy;
  busy.Push("a");
  busy.OnCancel();
  EXPECT_TRUE(busy.finished.empty());
  busy.OnWriteDone(true);
  EXPECT_EQ(busy.finished, std::vector<grpc::StatusCode>{grpc::CANCELLED});
}

TEST(WritePumpTest, FinishWaitsForEveryHold) {
  QueueStream s;
  s.Hold();
  s.Hold();
  s.OnCancel();
  EXPECT_TRUE(s.FinishRequested());
  EXPECT_TRUE(s.finished.empty());
  s.Release();
  EXPECT_TRUE(s.finished.empty());  // one hold left
  s.Release();
  EXPECT_EQ(s.finished, std::vector<grpc::StatusCode>{grpc::CANCELLED});
  // A write that fails while a hold is out finishes only at the release.
  QueueStream w;
  w.Push("a");
  w.Hold();
  w.OnWriteDone(false);
  EXPECT_TRUE(w.finished.empty());
  w.Release();
  EXPECT_EQ(w.finished, std::vector<grpc::StatusCode>{grpc::OK});
  // Without a finish request a hold changes nothing.
  QueueStream q;
  q.Hold();
  q.Release();
  EXPECT_FALSE(q.FinishRequested());
  q.Push("b");
  EXPECT_EQ(q.written, std::vector<std::string>{"b"});
}

TEST(WritePumpTest, TheReactorEndsTheStreamFromNextLocked) {
  QueueStream s;
  s.Push("a");
  s.End(grpc::Status(grpc::NOT_FOUND, "gone"));  // a in flight: not yet
  EXPECT_TRUE(s.finished.empty());
  s.OnWriteDone(true);  // asks again: the queue is empty -> end
  EXPECT_EQ(s.finished, std::vector<grpc::StatusCode>{grpc::NOT_FOUND});
  const int asked = s.asked();
  s.Poke();  // finished: the reactor is not asked again
  EXPECT_EQ(s.asked(), asked);
}

}  // namespace
}  // namespace frameworm::coordinator
