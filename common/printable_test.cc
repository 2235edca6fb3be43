#include "common/printable.h"

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(PrintableTest, BoundedWithoutControlCharacters) {
  EXPECT_EQ(PrintableLine("ok: at 10.0.0.7", 256), "ok: at 10.0.0.7");
  EXPECT_EQ(PrintableLine("a\x1b[2Jb\nc\x7f", 256), "a?[2Jb?c?");
  EXPECT_EQ(PrintableLine(std::string(300, 'x'), 256), std::string(256, 'x'));
  EXPECT_EQ(PrintableLine("", 10), "");
}

}  // namespace
}  // namespace frameworm
