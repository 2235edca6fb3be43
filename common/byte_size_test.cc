#include "common/byte_size.h"

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(ByteSizeTest, PicksTheUnitByMagnitude) {
  EXPECT_EQ(ByteSize(0), "0 B");
  EXPECT_EQ(ByteSize(1023), "1023 B");
  EXPECT_EQ(ByteSize(1024), "1.0 KiB");
  EXPECT_EQ(ByteSize(1536), "1.5 KiB");
  EXPECT_EQ(ByteSize(int64_t{64} << 20), "64.0 MiB");
  EXPECT_EQ(ByteSize(int64_t{5} << 30), "5120.0 MiB");
}

}  // namespace
}  // namespace frameworm
