#include "server/stop_matcher.h"

#include <gtest/gtest.h>

#include "server/text_splits.h"
#include "tokenizer/utf8.h"

namespace kiln {
namespace {

struct Streamed {
  std::string text;
  bool stopped = false;
};

Streamed run(const std::vector<std::string>& stops, const std::vector<std::string>& deltas) {
  StopMatcher m(stops);
  Streamed out;
  for (const std::string& d : deltas) {
    const std::string released = m.feed(d);
    EXPECT_TRUE(utf8::is_valid(released)) << "released a split code point: " << released;
    out.text += released;
  }
  out.text += m.finish();
  out.stopped = m.stopped();
  return out;
}

TEST(StopMatcher, EmptyStopListPassesThroughHoldingNothing) {
  StopMatcher m({});
  EXPECT_EQ(m.feed("Hello <"), "Hello <");
  EXPECT_EQ(m.feed(""), "");
  EXPECT_EQ(m.finish(), "");
  EXPECT_FALSE(m.stopped());
  StopMatcher only_empty({""});  // an empty stop string is ignored
  EXPECT_EQ(only_empty.feed("abc"), "abc");
  EXPECT_FALSE(only_empty.stopped());
}

TEST(StopMatcher, StopSplitAcrossManyDeltas) {
  StopMatcher m({"</end>"});
  EXPECT_EQ(m.feed("Hello <"), "Hello ");
  EXPECT_EQ(m.feed("/"), "");
  EXPECT_EQ(m.feed("en"), "");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.feed("d"), "");
  EXPECT_EQ(m.feed(">tail after"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("more"), "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, HeldSuffixIsReleasedOnceItCannotMatch) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("abc ST"), "abc ");
  EXPECT_EQ(m.feed("x"), "STx");
  EXPECT_EQ(m.feed("S"), "");
  EXPECT_EQ(m.finish(), "S");  // the end of generation flushes what was held
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, OverlappingCandidates) {
  // "abab" first completes at "aabab|ab": the text before it is "a".
  EXPECT_EQ(run({"abab"}, testing::code_points_of("aababab")).text, "a");
  EXPECT_EQ(run({"abab"}, testing::code_points_of("ababab")).text, "");
  // After "abaa" only "a" can still begin a match; "aba" is released.
  StopMatcher m({"abab"});
  EXPECT_EQ(m.feed("aba"), "");
  EXPECT_EQ(m.feed("a"), "aba");
  EXPECT_EQ(m.feed("bab"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, EarliestMatchWins) {
  const Streamed a = run({"world", "lo"}, {"hello world"});
  EXPECT_EQ(a.text, "hel");
  EXPECT_TRUE(a.stopped);
  // The first stop string to complete wins, however the text was split: "bc" completes before
  // "abcd" can.
  EXPECT_EQ(run({"abcd", "bc"}, {"xabcd"}).text, "xa");
  EXPECT_EQ(run({"abcd", "bc"}, testing::code_points_of("xabcd")).text, "xa");
  // Completing at the same byte, the one starting earlier is cut.
  EXPECT_EQ(run({"cd", "bcd"}, {"abcde"}).text, "a");
}

TEST(StopMatcher, StopAtTheVeryStart) {
  StopMatcher m({"Hi"});
  EXPECT_EQ(m.feed("Hi there"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, MultiByteStopStringsNeverSplitACodePoint) {
  const Streamed s = run({"终止", "。"}, testing::code_points_of("你好终了，终止吧"));
  EXPECT_EQ(s.text, "你好终了，");
  EXPECT_TRUE(s.stopped);
  StopMatcher m({"終わり"});
  EXPECT_EQ(m.feed("今日は終"), "今日は");
  EXPECT_EQ(m.feed("わ"), "");
  EXPECT_EQ(m.feed("る"), "終わる");
  // A stop string whose tail shares a lead byte with the text: "é" is C3 A9, "ê" is C3 AA.
  EXPECT_EQ(run({"ée"}, testing::code_points_of("cafêée")).text, "cafê");
}

TEST(StopMatcher, AnySplitGivesTheOneShotResult) {
  struct Case {
    std::vector<std::string> stops;
    std::string text;
    std::string expected;
    bool stopped;
  };
  const std::vector<Case> cases = {
      {{"\n\n"}, "line one\nline two\n\nthree", "line one\nline two", true},
      {{"abab", "bb"}, "aabaabbabab", "aabaa", true},
      {{"<|im_end|>", "Observation:"}, "Thought: x\nObservation: y", "Thought: x\n", true},
      {{"停", "xyz"}, "ça va? 好的停下", "ça va? 好的", true},
      {{"never"}, "no stop string in here, neve", "no stop string in here, neve", false},
      {{}, "pass <through>", "pass <through>", false},
  };
  for (const Case& c : cases) {
    const Streamed whole = run(c.stops, {c.text});
    EXPECT_EQ(whole.text, c.expected) << c.text;
    EXPECT_EQ(whole.stopped, c.stopped) << c.text;
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      const Streamed s = run(c.stops, testing::random_split(c.text, seed));
      EXPECT_EQ(s.text, c.expected) << c.text << " seed " << seed;
      EXPECT_EQ(s.stopped, c.stopped) << c.text << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace kiln
