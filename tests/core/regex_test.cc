// core/regex: compile errors that name the pattern and offset, the pattern cap, limits that stop
// catastrophic backtracking and deep nesting with an error instead of a hang or a crash, UTF-8
// offsets and classes, captures, full matches and the iteration over matches.
#include "core/regex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln {
namespace {

Regex compiled(std::string_view pattern, const RegexOptions& options = {}) {
  Result<Regex> r = Regex::compile(pattern, options);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : Regex();
}

// The span of the first match at or after `start`, or {-1, -1} when there is none.
std::pair<long, long> span(const Regex& re, std::string_view text, size_t start = 0) {
  Result<std::optional<RegexMatch>> m = re.find(text, start);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok() || !m->has_value()) return {-1, -1};
  return {static_cast<long>((*m)->begin()), static_cast<long>((*m)->end())};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Regex, CompileErrorsNameThePatternAndTheOffset) {
  struct Case {
    const char* pattern;
    const char* offset;
  };
  const Case cases[] = {{"(unclosed", "at offset 9:"}, {"a)b", "at offset 1:"}, {"x{2,1}", "at offset 5:"}};
  for (const Case& c : cases) {
    Result<Regex> r = Regex::compile(c.pattern);
    ASSERT_FALSE(r.ok()) << c.pattern;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    const std::string& msg = r.status().message();
    EXPECT_EQ(msg.rfind("the pattern '" + std::string(c.pattern) + "' does not compile " + c.offset, 0), 0u) << msg;
  }
}

TEST(Regex, PatternsOverTheCapAreRefusedAtCompile) {
  EXPECT_TRUE(Regex::compile(std::string(4096, 'a')).ok());
  Result<Regex> over = Regex::compile(std::string(4097, 'a'));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("over the cap of 4,096 bytes"), std::string::npos) << over.status().message();
  // The message quotes the start of a long pattern, not all of it.
  EXPECT_LT(over.status().message().size(), 300u);
  RegexOptions small;
  small.limits->max_pattern_bytes = 3;
  EXPECT_FALSE(Regex::compile("abcd", small).ok());
  EXPECT_FALSE(Regex::literal("abcd", small).ok());
}

TEST(Regex, CatastrophicBacktrackingStopsAtTheMatchLimitQuickly) {
  const std::string text = std::string(10'000, 'a') + "b";
  for (const char* pattern : {"(a+)+$", "(a|aa)+$", "(a|a)*$", "(?:a*)*(?:a*)*c?$"}) {
    const Regex re = compiled(pattern);
    const auto t0 = std::chrono::steady_clock::now();
    Result<std::optional<RegexMatch>> m = re.find(text);
    const double s = seconds_since(t0);
    ASSERT_FALSE(m.ok()) << pattern << " matched";
    EXPECT_EQ(m.status().code(), ErrorCode::kResourceExhausted) << m.status().message();
    EXPECT_EQ(m.status().message(), "the pattern '" + std::string(pattern) +
                                        "' exceeded its match limit (1,000,000 steps) on 10,001 bytes of text");
    EXPECT_LT(s, 5.0) << pattern;
  }
}

TEST(Regex, FullMatchIsBoundedByTheSameLimits) {
  // full_match runs in the interpreter, which counts the same steps as the JIT.
  const Regex re = compiled("(a+)+");
  Result<bool> m = re.full_match(std::string(10'000, 'a') + "b");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("match limit"), std::string::npos) << m.status().message();
}

TEST(Regex, TighterLimitsAreTheOnesReported) {
  RegexOptions tight;
  tight.limits->match_limit = 1000;
  Result<std::optional<RegexMatch>> m = compiled("(a+)+$", tight).find(std::string(30, 'a') + "b");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("match limit (1,000 steps) on 31 bytes"), std::string::npos) << m.status().message();
}

TEST(Regex, WithLimitsOffPcre2sOwnApplyAndNoPatternCap) {
  RegexOptions trusted;
  trusted.limits = std::nullopt;
  EXPECT_TRUE(Regex::compile(std::string(5000, 'a'), trusted).ok());
  Result<std::optional<RegexMatch>> m = compiled("(a+)+$", trusted).find(std::string(10'000, 'a') + "b");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "the pattern '(a+)+$' exceeded its match limit (10,000,000 steps) on 10,001 bytes of text");
}

TEST(Regex, DeepNestingInThePatternIsACompileErrorNotACrash) {
  for (int depth : {300, 2000}) {
    const std::string pattern = std::string(depth, '(') + "a" + std::string(depth, ')');
    Result<Regex> r = Regex::compile(pattern);
    ASSERT_FALSE(r.ok()) << depth;
    EXPECT_NE(r.status().message().find("too deeply nested"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(Regex::compile(std::string(200, '(') + "a" + std::string(200, ')')).ok());
}

TEST(Regex, DeepNestingInTheTextHitsALimitNotTheStack) {
  // A recursive pattern over 100,000 nested parentheses needs a frame per level.
  const std::string text = std::string(100'000, '(') + std::string(100'000, ')');
  const Regex balanced = compiled(R"(\((?:[^()]|(?R))*\))");
  Result<std::optional<RegexMatch>> found = balanced.find(text);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(found.status().message().find("stack limit (4,096 KiB) on 200,000 bytes"), std::string::npos)
      << found.status().message();
  // The interpreter (full_match) stops at its depth or heap limit instead.
  Result<bool> whole = balanced.full_match(text);
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.status().code(), ErrorCode::kResourceExhausted) << whole.status().message();
  // A repeated group over a long text is the same kind of depth.
  Result<std::optional<RegexMatch>> repeated = compiled("(.|\\n)*$").find(std::string(1 << 20, 'x'));
  ASSERT_FALSE(repeated.ok());
  EXPECT_EQ(repeated.status().code(), ErrorCode::kResourceExhausted) << repeated.status().message();
}

TEST(Regex, LinearPatternsOverAMegabyteStayWithinTheDefaultLimits) {
  const std::string sentence = "word 12,345 more-words, and 6.5e3; ";  // digit runs: 12,345 6 5 3
  const size_t sentences = (1 << 20) / sentence.size() + 1;
  std::string text;
  for (size_t i = 0; i < sentences; ++i) text += sentence;
  Result<std::optional<RegexMatch>> far = compiled("foo.*bar").find(text);
  ASSERT_TRUE(far.ok()) << far.status().message();
  EXPECT_FALSE(far->has_value());
  size_t numbers = 0;
  Status st = compiled("[0-9]+(?:,[0-9]{3})*").for_each_match(text, [&](size_t, size_t) { ++numbers; });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(numbers, 4 * sentences);
  Result<std::optional<RegexMatch>> repeated = compiled("(?:.|\\n)*$").find(std::string(100'000, 'x'));
  ASSERT_TRUE(repeated.ok()) << repeated.status().message();
  EXPECT_EQ((*repeated)->end(), 100'000u);
}

TEST(Regex, OffsetsAreBytesAndClassesAreUnicode) {
  // "é" is two bytes; "." takes the whole character.
  EXPECT_EQ(span(compiled("."), "\xc3\xa9x"), std::make_pair(0L, 2L));
  EXPECT_EQ(span(compiled("x"), "\xc3\xa9x"), std::make_pair(2L, 3L));
  // \w, \d and \b follow Unicode properties.
  EXPECT_EQ(span(compiled("\\w+"), "na\xc3\xafve!"), std::make_pair(0L, 6L));
  EXPECT_EQ(span(compiled("\\d"), "\xd9\xa3"), std::make_pair(0L, 2L));  // ARABIC-INDIC DIGIT THREE
  EXPECT_EQ(span(compiled("\\bB\\b"), "\xc3\xa9" "B"), std::make_pair(-1L, -1L));
  // Case folding is Unicode's.
  RegexOptions fold;
  fold.case_mode = RegexCase::kInsensitive;
  EXPECT_EQ(span(compiled("\xc3\x89t\xc3\xa9", fold), "un \xc3\xa9T\xc3\x89"), std::make_pair(3L, 8L));
  EXPECT_EQ(span(compiled("\xc3\x89t\xc3\xa9"), "un \xc3\xa9T\xc3\x89"), std::make_pair(-1L, -1L));
}

TEST(Regex, InvalidUtf8InTheTextMatchesNothingAndIsNotAnError) {
  const std::string text = "\xff\xfe" "b\xc3";
  EXPECT_EQ(span(compiled("b"), text), std::make_pair(2L, 3L));
  EXPECT_EQ(span(compiled("."), text), std::make_pair(2L, 3L));
  EXPECT_EQ(span(compiled("\\xff"), text), std::make_pair(-1L, -1L));
  Result<Regex> bad_pattern = Regex::compile("\xff");
  ASSERT_FALSE(bad_pattern.ok());
  EXPECT_NE(bad_pattern.status().message().find("UTF-8"), std::string::npos) << bad_pattern.status().message();
}

TEST(Regex, FindReturnsCaptureGroupsAndStartsAtTheOffset) {
  const Regex re = compiled("([0-9]+)-(x)?([0-9]+)");
  const std::string text = "ab 12-34 and 5-6";
  Result<std::optional<RegexMatch>> m = re.find(text);
  ASSERT_TRUE(m.ok() && m->has_value());
  const RegexMatch& hit = **m;
  ASSERT_EQ(hit.spans.size(), 4u);
  EXPECT_EQ(hit.begin(), 3u);
  EXPECT_EQ(hit.end(), 8u);
  EXPECT_EQ(hit.group(text, 1), std::optional<std::string_view>("12"));
  EXPECT_EQ(hit.group(text, 2), std::nullopt);  // took no part
  EXPECT_EQ(hit.group(text, 3), std::optional<std::string_view>("34"));
  EXPECT_EQ(hit.group(text, 4), std::nullopt);  // no such group
  EXPECT_EQ(span(re, text, 5), std::make_pair(13L, 16L));
  EXPECT_EQ(span(re, text, 14), std::make_pair(-1L, -1L));
}

TEST(Regex, FullMatchMustCoverTheWholeText) {
  const Regex re = compiled("a|ab");
  EXPECT_TRUE(re.full_match("ab").value());  // the second alternative, after the first ends early
  EXPECT_TRUE(re.full_match("a").value());
  EXPECT_FALSE(re.full_match("abc").value());
  EXPECT_FALSE(re.full_match("xab").value());
}

TEST(Regex, ForEachMatchStepsOverEmptyMatchesByOneCharacter) {
  std::vector<std::pair<size_t, size_t>> seen;
  Status st = compiled("x*").for_each_match("\xc3\xa9xx", [&](size_t b, size_t e) { seen.emplace_back(b, e); });
  ASSERT_TRUE(st.ok());
  const std::vector<std::pair<size_t, size_t>> want = {{0, 0}, {2, 4}, {4, 4}};
  EXPECT_EQ(seen, want);
}

TEST(Regex, ForEachMatchStopsAtTheFirstLimitAndReturnsIt) {
  int calls = 0;
  Status st = compiled("a|(b+)+$").for_each_match("a" + std::string(10'000, 'b') + "c", [&](size_t, size_t) { ++calls; });
  EXPECT_EQ(calls, 1);  // the leading "a", before the search that runs away
  EXPECT_EQ(st.code(), ErrorCode::kResourceExhausted);
}

TEST(Regex, LiteralsMatchEveryCharacterAsItself) {
  Result<Regex> lit = Regex::literal("a.b(\\d");
  ASSERT_TRUE(lit.ok()) << lit.status().to_string();
  EXPECT_EQ(span(*lit, "xx a.b(\\d"), std::make_pair(3L, 9L));
  EXPECT_EQ(span(*lit, "axb(\\d"), std::make_pair(-1L, -1L));
  EXPECT_EQ(lit->pattern(), "a.b(\\d");
}

TEST(Regex, ADefaultRegexMatchesNothing) {
  const Regex none;
  EXPECT_EQ(span(none, "anything"), std::make_pair(-1L, -1L));
  EXPECT_FALSE(none.full_match("").value());
  EXPECT_EQ(none.pattern(), "");
}

TEST(Regex, ThreadsShareACompiledPattern) {
  const Regex re = compiled("([a-z]+)=([0-9]+)");
  std::vector<int> right(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string text = "key" + std::to_string(t) + " k=" + std::to_string(i * 7 + t);
        Result<std::optional<RegexMatch>> m = re.find(text);
        if (m.ok() && m->has_value() && (*m)->group(text, 2) == std::to_string(i * 7 + t)) ++right[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(right, std::vector<int>(4, 500));
}

}  // namespace
}  // namespace kiln
