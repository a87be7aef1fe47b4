// UTF-8 replacement must match Python's bytes.decode("utf-8", "replace") (maximal subparts); the
// expected strings below are what CPython 3.11 returns for each input.
#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace kiln {
namespace {

struct Case {
  std::string input;
  std::string python_replace;
};

TEST(Utf8, SanitizeMatchesPythonReplace) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  const Case cases[] = {
      {"\xF0\x9F\x98", r},                       // truncated 4-byte sequence: one replacement
      {"\xED\xA0\x80", r + r + r},               // encoded surrogate: one per byte
      {"\xC0\xAF", r + r},                       // overlong
      {"\xE2\x28\xA1", r + "(" + r},             // bad continuation
      {"\xF4\x90\x80\x80", r + r + r + r},       // above U+10FFFF
      {"a\x80" "b", "a" + r + "b"},              // lone continuation
      {"\xF0\x9F\x98\x80\xF0", "\xF0\x9F\x98\x80" + r},
      {"plain ascii", "plain ascii"},
      {"\xEF\xBF\xBD", r},                       // U+FFFD itself is well-formed
  };
  for (const auto& c : cases) EXPECT_EQ(utf8::sanitize(c.input), c.python_replace);
}

TEST(Utf8, SettledPrefixHoldsBackOnlyCompletableTails) {
  EXPECT_EQ(utf8::settled_prefix_length("ab\xF0\x9F\x98"), 2u);   // could still become U+1F600
  EXPECT_EQ(utf8::settled_prefix_length("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8::settled_prefix_length("ab\xE4"), 2u);
  EXPECT_EQ(utf8::settled_prefix_length("ab\xE4\x28"), 4u);       // can no longer complete
  EXPECT_EQ(utf8::settled_prefix_length("ab\x80"), 3u);           // stray continuation: final
  EXPECT_EQ(utf8::settled_prefix_length("ab\xFF"), 3u);
  EXPECT_EQ(utf8::settled_prefix_length("\xED\xA0"), 2u);         // surrogate prefix: invalid already
}

TEST(Utf8, PythonSpaceAndWhiteSpaceDiffer) {
  EXPECT_TRUE(utf8::is_python_space(0x1C));   // '\x1c'.isspace() is True in Python
  EXPECT_FALSE(utf8::is_white_space(0x1C));   // but it is not Unicode White_Space
  EXPECT_TRUE(utf8::is_white_space(0x85));
  EXPECT_FALSE(utf8::is_white_space(0xFEFF));
}

}  // namespace
}  // namespace kiln
