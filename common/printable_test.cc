#include "common/printable.h"

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(PrintableTest, BoundedWithoutControlCharacters) {
  EXPECT_EQ(PrintableLine("ok: at 10.0.0.7", 256), "ok: at 10.0.0.7");
  EXPECT_EQ(PrintableLine("a\x1b[2Jb\nc\x7f", 256), "a?[2Jb?c?");
  EXPECT_EQ(PrintableLine(std::string(300, 'x'), 256), std::string(256, 'x'));
  EXPECT_EQ(PrintableLine("", 10), "");
  // C1 controls (U+0080..U+009F; U+009B is CSI to some terminals) are one
  // '?' each; U+00A0 and up pass.
  EXPECT_EQ(PrintableLine("a\xc2\x9b" "2Jb\xc2\x80\xc2\x9f\xc2\xa0", 256), "a?2Jb??\xc2\xa0");
  EXPECT_TRUE(HasControlCharacter("a\xc2\x9b" "2J"));
  EXPECT_TRUE(HasControlCharacter("a\tb"));
  EXPECT_FALSE(HasControlCharacter("r\xc3\xa9sum\xc3\xa9\xc2\xa0\xe2\x82\xac"));
}

// Valid UTF-8 passes whole; anything else becomes '?', and a cut never
// splits a character, so the result is always a valid proto3 string.
TEST(PrintableTest, IsValidUtf8RefusesEveryMalformedSequence) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("r\xc3\xa9sum\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));  // NUL is UTF-8 (other rules refuse it)
  for (const char* bad : {"a\x80", "a\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "\xff", "caf\xe9"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << bad;
    EXPECT_NE(PrintableLine(bad, 16), bad) << "PrintableLine replaces what IsValidUtf8 refuses";
  }
}

TEST(PrintableTest, AlwaysValidUtf8AndNeverHalfACharacter) {
  EXPECT_EQ(PrintableLine("r\xc3\xa9sum\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 256),
            "r\xc3\xa9sum\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  // 255 ASCII bytes then the euro sign (3 bytes): cut before it, not in it.
  const std::string line = std::string(255, 'a') + "\xe2\x82\xac";
  EXPECT_EQ(PrintableLine(line, 256), std::string(255, 'a'));
  EXPECT_EQ(PrintableLine(line, 258), line);
  // Stray continuation bytes, a lone lead byte, overlongs, surrogates, past
  // U+10FFFF, and invalid bytes.
  EXPECT_EQ(PrintableLine("a\x80" "b", 10), "a?b");
  EXPECT_EQ(PrintableLine("a\xe2\x82", 10), "a??");
  EXPECT_EQ(PrintableLine("\xc0\xaf", 10), "??");
  EXPECT_EQ(PrintableLine("\xed\xa0\x80", 10), "???");
  EXPECT_EQ(PrintableLine("\xf4\x90\x80\x80", 10), "????");
  EXPECT_EQ(PrintableLine("\xff\xfe", 10), "??");
  // Every possible 2-byte input, cut at every length: valid UTF-8 within
  // the bound (checked by decoding it again).
  for (int x = 0; x < 256; ++x) {
    for (int y = 0; y < 256; ++y) {
      const std::string in = {'z', static_cast<char>(x), static_cast<char>(y)};
      for (size_t max = 0; max <= 4; ++max) {
        const std::string out = PrintableLine(in, max);
        ASSERT_LE(out.size(), max);
        ASSERT_EQ(PrintableLine(out, 100), out) << x << " " << y << " " << max;
      }
    }
  }
}

}  // namespace
}  // namespace frameworm
