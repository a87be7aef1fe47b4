#include "server/text_holdback.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(MarkerPrefixSuffix, LongestSuffixThatIsAProperPrefix) {
  EXPECT_EQ(marker_prefix_suffix("hello <th", "<think>"), 3u);
  EXPECT_EQ(marker_prefix_suffix("hello <", "<think>"), 1u);
  EXPECT_EQ(marker_prefix_suffix("hello", "<think>"), 0u);
  EXPECT_EQ(marker_prefix_suffix("<think>", "<think>"), 0u);  // a whole marker is a match, not a prefix
  EXPECT_EQ(marker_prefix_suffix("ababa", "abab"), 3u);
  EXPECT_EQ(marker_prefix_suffix("", "abc"), 0u);
  EXPECT_EQ(marker_prefix_suffix("abc", ""), 0u);
}

TEST(EdgeTrimmer, BothEdgesHoldTrailingWhitespaceUntilTextFollows) {
  EdgeTrimmer t(EdgeTrimmer::Edges::kBoth);
  EXPECT_EQ(t.feed("\n \t"), "");
  EXPECT_EQ(t.feed("\nab c"), "ab c");
  EXPECT_EQ(t.feed("\n\n"), "");
  EXPECT_EQ(t.feed(" d\n"), "\n\n d");
  t.end_span();  // the held "\n" is dropped
  EXPECT_EQ(t.feed("\r\nnext"), "next");
}

TEST(EdgeTrimmer, LeadingOnlyKeepsTrailingWhitespace) {
  EdgeTrimmer t(EdgeTrimmer::Edges::kLeading);
  EXPECT_EQ(t.feed("\n\n"), "");
  EXPECT_EQ(t.feed(" Hello \n"), "Hello \n");
  EXPECT_EQ(t.feed("\n"), "\n");
}

}  // namespace
}  // namespace kiln
