// Regular expressions as grammars: tiny patterns enumerate to the strings written by hand, random
// strings of larger patterns match them whole under PCRE2 (core's Regex, an engine independent
// of the grammar's), and what is not regular is refused by name.
#include <gtest/gtest.h>

#include "core/regex.h"
#include "grammar/regex_grammar.h"
#include "grammar_test_util.h"

namespace kiln::grammar {
namespace {

using testing::compile_or_die;
using testing::enumerate;
using Set = std::set<std::string>;

std::shared_ptr<const Automaton> regex(std::string_view pattern) { return compile_or_die(regex_grammar(pattern)); }

Set language(std::string_view pattern, size_t max_len = 8) {
  auto a = regex(pattern);
  if (!a) return {};
  bool truncated = false;
  Set out = enumerate(a, max_len, &truncated);
  EXPECT_FALSE(truncated) << pattern << " has strings longer than " << max_len;
  return out;
}

std::string error_of(std::string_view pattern) {
  auto g = regex_grammar(pattern);
  return g.ok() ? "" : g.status().message();
}

TEST(RegexGrammar, TinyPatternsDenoteTheirStrings) {
  EXPECT_EQ(language("a|bc?"), (Set{"a", "b", "bc"}));
  EXPECT_EQ(language("[a-c]{2}"), (Set{"aa", "ab", "ac", "ba", "bb", "bc", "ca", "cb", "cc"}));
  EXPECT_EQ(language("(ab)?c"), (Set{"c", "abc"}));
  EXPECT_EQ(language("(?:x|y){0,2}"), (Set{"", "x", "y", "xx", "xy", "yx", "yy"}));
  EXPECT_EQ(language("(?<n>a)b{1,2}?"), (Set{"ab", "abb"}));  // named group, lazy quantifier
  EXPECT_EQ(language("\\d"), (Set{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
  EXPECT_EQ(language("a\\.\\*\\x41\\u0042\\u{43}"), (Set{"a.*ABC"}));
  EXPECT_EQ(language("\\x4a\\u00E9\\u{1F600}"), (Set{"J\xC3\xA9\xF0\x9F\x98\x80"}));
  EXPECT_EQ(language("[\\-a\\]]"), (Set{"-", "a", "]"}));
  EXPECT_EQ(language("^ab$"), (Set{"ab"}));  // anchors at the ends are implied anyway
  EXPECT_EQ(language("a{2}{2}"), (Set{"aaaa"}));
}

TEST(RegexGrammar, ABraceThatIsNoQuantifierIsALiteral) { EXPECT_EQ(language("a{,2}"), (Set{"a{,2}"})); }

TEST(RegexGrammar, DotAndNegatedClassesMatchWholeCharactersButNotLineEnds) {
  auto a = regex("x.y[^a]");
  ASSERT_TRUE(a);
  Matcher m(a);
  EXPECT_TRUE(m.accepts("x\xE2\x82\xAC" "y\xC3\xA9"));  // x€yé
  EXPECT_FALSE(m.accepts("x\ny"));
  EXPECT_FALSE(m.accepts("x\ry"));
  EXPECT_FALSE(m.accepts("xzya"));
  EXPECT_FALSE(m.accepts("x\xFF"));
}

TEST(RegexGrammar, RandomStringsMatchThePatternUnderPcre2) {
  const char* patterns[] = {
      "[a-z]{1,4}(-[0-9]+)?",
      "(foo|bar|baz)+!?",
      "\\w+@\\w+\\.(com|org)",
      "[^\\s,]{1,3}(,[^\\s,]{1,3}){0,3}",
      "(\\d{3}-){2}\\d{4}",
      "[A-Fa-f0-9]{2}(:[A-Fa-f0-9]{2}){5}",
      "\\s*[+-]?\\d+(\\.\\d*)?\\s*",
      "(a|ab)(c|bcd)(d*)",
      "[é-ü]{2}|é+",
  };
  std::mt19937_64 rng(11);
  for (const char* p : patterns) {
    auto a = regex(p);
    ASSERT_TRUE(a) << p;
    auto oracle = Regex::compile(std::string("^(?:") + p + ")$");
    ASSERT_TRUE(oracle.ok()) << oracle.status().to_string();
    for (int i = 0; i < 200; ++i) {
      auto s = testing::random_bytes(a, rng, 5000, 0.3);
      ASSERT_TRUE(s.has_value()) << p;
      auto m = oracle->full_match(*s);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EXPECT_TRUE(*m) << "'" << *s << "' does not match " << p;
    }
  }
}

TEST(RegexGrammar, StringsOutsideThePatternAreRefused) {
  auto a = regex("(\\d{3}-){2}\\d{4}");
  ASSERT_TRUE(a);
  for (const char* s : {"123-456-789", "123-456-78901", "12a-456-7890", "123456-7890", ""}) {
    Matcher m(a);
    EXPECT_FALSE(m.advance(s) && m.is_complete()) << s;
  }
  Matcher ok(a);
  EXPECT_TRUE(ok.advance("123-456-7890") && ok.is_complete());
}

TEST(RegexGrammar, ConstructsThatAreNotRegularAreRefusedByName) {
  EXPECT_EQ(error_of("(a)\\1"), "regex '(a)\\1': backreference '\\1' is not supported (not a regular language) at offset 3");
  EXPECT_EQ(error_of("(?<x>a)\\k<x>"), "regex '(?<x>a)\\k<x>': backreference '\\k' is not supported (not a regular language) at offset 7");
  EXPECT_EQ(error_of("a(?=b)"), "regex 'a(?=b)': lookahead is not supported (not a regular language) at offset 1");
  EXPECT_EQ(error_of("a(?!b)"), "regex 'a(?!b)': lookahead is not supported (not a regular language) at offset 1");
  EXPECT_EQ(error_of("(?<=a)b"), "regex '(?<=a)b': lookbehind is not supported (not a regular language) at offset 0");
  EXPECT_EQ(error_of("\\bword"), "regex '\\bword': word boundary '\\b' is not supported (not a regular language over characters) at offset 0");
  EXPECT_EQ(error_of("a++"), "regex 'a++': possessive quantifier (it changes the language by refusing to backtrack) is not supported at offset 2");
  EXPECT_EQ(error_of("\\p{L}"), "regex '\\p{L}': Unicode property escapes are not supported at offset 0");
}

TEST(RegexGrammar, MalformedPatternsAreErrorsWithTheirOffset) {
  EXPECT_EQ(error_of("(ab"), "regex '(ab': '(' is never closed at offset 0");
  EXPECT_EQ(error_of("ab)"), "regex 'ab)': ')' without a matching '(' at offset 2");
  EXPECT_EQ(error_of("[ab"), "regex '[ab': character class is never closed at offset 0");
  EXPECT_EQ(error_of("*a"), "regex '*a': nothing to repeat at offset 0");
  EXPECT_EQ(error_of("a^b"), "regex 'a^b': anchor '^' inside the pattern is not supported (only at its start) at offset 1");
  EXPECT_EQ(error_of("[z-a]"), "regex '[z-a]': character range ends below where it starts at offset 2");
  EXPECT_EQ(error_of("a{3,2}"), "regex 'a{3,2}': repeat maximum below its minimum at offset 1");
  EXPECT_EQ(error_of("\\q"), "regex '\\q': unknown escape '\\q' at offset 0");
  EXPECT_EQ(error_of("\\x4"), "regex '\\x4': escape needs 2 hex digits at offset 0");
  EXPECT_EQ(error_of("a\\u{110000}"), "regex 'a\\u{110000}': escape names no Unicode scalar value at offset 1");
  EXPECT_EQ(error_of("a\xff"), "regex 'a\xff': the pattern is not valid UTF-8 at offset 1");
}

TEST(RegexGrammar, PatternsTooLargeToDetermineAreRefused) {
  // The classic blow-up: the last 20 characters must be remembered, 2^20 states.
  auto g = regex_grammar("(a|b)*a(a|b){20}");
  ASSERT_TRUE(g.ok());
  CompileLimits limits;
  limits.max_states = 5000;
  auto a = compile_grammar(*g, limits);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(),
            "rule 'root' needs more than 5000 automaton states (the grammar is too large or too ambiguous)");
  auto small = regex_grammar("(a|b)*a(a|b){8}");  // 2^9 states fit
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(compile_grammar(*small, limits).ok());
}

}  // namespace
}  // namespace kiln::grammar
