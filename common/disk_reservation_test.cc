#include "common/disk_reservation.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/received_file.h"
#include "gtest/gtest.h"

namespace frameworm {
namespace {

namespace fs = std::filesystem;

// What may be reserved on the filesystem of `dir` now: free, less the
// margin kept free.
int64_t Room(const std::string& dir) {
  struct statvfs v {};
  EXPECT_EQ(::statvfs(dir.c_str(), &v), 0);
  const int64_t unit = static_cast<int64_t>(v.f_frsize);
  return static_cast<int64_t>(v.f_bavail) * unit -
         DiskReservation::KeptFree(static_cast<int64_t>(v.f_blocks) * unit);
}

TEST(DiskReservationTest, TheMarginIsAGibibyteOrOneTwentieth) {
  EXPECT_EQ(DiskReservation::KeptFree(int64_t{100} << 30), int64_t{1} << 30);
  EXPECT_EQ(DiskReservation::KeptFree(int64_t{64} << 20), (int64_t{64} << 20) / 20);
}

// A size larger than the room is refused before anything is written;
// transfers in flight hold their room until written or ended, so two that
// fit alone but not together cannot both start.
TEST(DiskReservationTest, ReservationsCannotOvercommitTheDisk) {
  const std::string dir = ::testing::TempDir();
  ASSERT_EQ(DiskReservation::HeldOn(dir), 0);
  const int64_t room = Room(dir);
  ASSERT_GT(room, 10 << 20) << "the test needs some free space";
  auto too_big = DiskReservation::Take(dir, room + (int64_t{1} << 30), "ckpt-7.pt");
  ASSERT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("no room for ckpt-7.pt"), std::string::npos)
      << too_big.status();
  EXPECT_EQ(DiskReservation::HeldOn(dir), 0);
  EXPECT_EQ(DiskReservation::Take(dir, int64_t{1} << 62, "x").status().code(),
            absl::StatusCode::kResourceExhausted);

  const int64_t part = room / 10 * 6;
  auto first = DiskReservation::Take(dir, part, "first");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(DiskReservation::HeldOn(dir), part);
  auto second = DiskReservation::Take(dir, part, "second");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("reserved for transfers in flight"),
            std::string::npos)
      << second.status();
  (*first)->Used(room / 10);  // written: now taken from the free space itself
  EXPECT_EQ(DiskReservation::HeldOn(dir), part - room / 10);
  first->reset();
  EXPECT_EQ(DiskReservation::HeldOn(dir), 0);
  second = DiskReservation::Take(dir, part, "second");
  EXPECT_TRUE(second.ok()) << second.status();
}

// A user's own download keeps no margin: a size that fits the free space
// but not with the daemons' margin is taken with keep_free 0.
TEST(DiskReservationTest, ThereIsNoMarginWhenTheCallerAsksForNone) {
  const std::string dir = ::testing::TempDir();
  struct statvfs v {};
  ASSERT_EQ(::statvfs(dir.c_str(), &v), 0);
  const int64_t free = static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
  const int64_t keep = DiskReservation::KeptFree(static_cast<int64_t>(v.f_blocks) *
                                                 static_cast<int64_t>(v.f_frsize));
  ASSERT_GT(keep, 16 << 20) << "the test needs a filesystem of some size";
  const int64_t bytes = free - keep / 2;
  EXPECT_EQ(DiskReservation::Take(dir, bytes, "x").status().code(),
            absl::StatusCode::kResourceExhausted);
  auto mine = DiskReservation::Take(dir, bytes, "x", /*keep_free=*/0);
  EXPECT_TRUE(mine.ok()) << mine.status();
}

// A received file announced larger than its disk's room is refused at
// Create (RESOURCE_EXHAUSTED) and leaves no partial file.
TEST(DiskReservationTest, AReceivedFileTooLargeForItsDiskIsRefusedUpFront) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/room-", ::getpid());
  fs::create_directories(dir);
  auto in = ReceivedFile::Create(dir + "/ckpt-3.pt", int64_t{1} << 50);
  EXPECT_EQ(in.status().code(), absl::StatusCode::kResourceExhausted) << in.status();
  EXPECT_TRUE(fs::is_empty(dir));
  auto ok = ReceivedFile::Create(dir + "/ckpt-4.pt", 4);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(DiskReservation::HeldOn(dir), 4);
  ASSERT_TRUE((*ok)->Append("abcd").ok());
  EXPECT_EQ(DiskReservation::HeldOn(dir), 0);
  ok->reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace frameworm
