// EscapeForLog and IsPrintableUtf8: names from outside reach logs, reports,
// JSON and /metrics; printable UTF-8 passes unchanged, anything else is
// escaped onto one printable line.
#include "base/text_escape.h"

#include <string>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

TEST(TextEscape, PrintableUtf8PassesUnchanged) {
  for (const std::string s :
       {"", "job-42", "ampere_sgemm_128x64_nn", "Überlauf", "日本語のジョブ",
        "emoji \xF0\x9F\x98\x80", "a\\b \"quoted\""}) {
    EXPECT_TRUE(IsPrintableUtf8(s)) << s;
    EXPECT_EQ(EscapeForLog(s), s);
  }
}

// Regression: `bad\xff\xfe-job` broke /metrics and JSON, and a
// name with a newline forged a log line.
TEST(TextEscape, ControlCharactersAndBadBytesAreEscaped) {
  EXPECT_FALSE(IsPrintableUtf8("bad\xff\xfe-job"));
  EXPECT_EQ(EscapeForLog("bad\xff\xfe-job"), "bad\\xff\\xfe-job");
  EXPECT_EQ(EscapeForLog("job\n[error] forged line"),
            "job\\n[error] forged line");
  EXPECT_EQ(EscapeForLog("a\tb\rc"), "a\\tb\\rc");
  EXPECT_EQ(EscapeForLog("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(EscapeForLog(std::string("nul\0byte", 8)), "nul\\x00byte");
  EXPECT_EQ(EscapeForLog("del\x7f"), "del\\x7f");
  // C1 control U+0085 (NEL) is a line break to some readers.
  EXPECT_EQ(EscapeForLog("c1\xC2\x85"), "c1\\xc2\\x85");
}

TEST(TextEscape, MalformedUtf8IsEscapedBytewise) {
  // Overlong '/', a surrogate, past U+10FFFF, truncated, stray continuation.
  for (const std::string s :
       {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE6\x97", "\x80"}) {
    EXPECT_FALSE(IsPrintableUtf8(s));
    std::string escaped = EscapeForLog(s);
    EXPECT_TRUE(IsPrintableUtf8(escaped)) << escaped;
    EXPECT_EQ(escaped.size(), 4 * s.size()) << escaped;
  }
  // Good sequences around bad bytes survive.
  EXPECT_EQ(EscapeForLog("\xC3\xA9\xFF\xC3\xA9"), "\xC3\xA9\\xff\xC3\xA9");
}

TEST(TextEscape, SequenceLengths) {
  EXPECT_EQ(Utf8SequenceLength(""), 0u);
  EXPECT_EQ(Utf8SequenceLength("a"), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xC3\xA9"), 2u);
  EXPECT_EQ(Utf8SequenceLength("\xE6\x97\xA5"), 3u);
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\x98"), 0u);
}

}  // namespace
}  // namespace bubblewatch
