// GBNF: the language of each construct, enumerated for tiny grammars against the set written by
// hand; random strings of larger grammars checked by independent means (a JSON parser, a
// bracket counter); errors name the line and column at fault.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/gbnf.h"
#include "grammar_test_util.h"

namespace kiln::grammar {
namespace {

using testing::enumerate;
using testing::gbnf;
using Set = std::set<std::string>;

Set language(std::string_view text, size_t max_len = 12) {
  auto a = gbnf(text);
  if (!a) return {};
  bool truncated = false;
  Set out = enumerate(a, max_len, &truncated);
  EXPECT_FALSE(truncated) << "the language of " << text << " has strings longer than " << max_len;
  return out;
}

std::string error_of(std::string_view text) {
  auto g = parse_gbnf(text);
  if (!g.ok()) return g.status().message();
  auto a = compile_grammar(*g);
  return a.ok() ? "" : a.status().message();
}

TEST(Gbnf, LiteralsAlternativesAndGroupsDenoteTheirStrings) {
  EXPECT_EQ(language(R"(root ::= "ab" | "c" ("d" | "e"))"), (Set{"ab", "cd", "ce"}));
  EXPECT_EQ(language("root ::= \"\" | \"x\""), (Set{"", "x"}));
}

TEST(Gbnf, RulesReferToEachOtherInAnyOrder) {
  EXPECT_EQ(language("root ::= a b\nb ::= \"2\" | \"3\"\na ::= \"1\""), (Set{"12", "13"}));
}

TEST(Gbnf, PostfixOperatorsRepeatTheirOperand) {
  EXPECT_EQ(language(R"(root ::= "a"? "b")"), (Set{"b", "ab"}));
  EXPECT_EQ(language(R"(root ::= "a"{2})"), (Set{"aa"}));
  EXPECT_EQ(language(R"(root ::= "a"{1,3})"), (Set{"a", "aa", "aaa"}));
  EXPECT_EQ(language(R"(root ::= "a"{,2})"), (Set{"", "a", "aa"}));
  bool truncated = false;
  EXPECT_EQ(enumerate(gbnf(R"(root ::= "a"{2,})"), 4, &truncated), (Set{"aa", "aaa", "aaaa"}));
  EXPECT_TRUE(truncated);
  EXPECT_EQ(enumerate(gbnf(R"(root ::= "ab"*)"), 6, &truncated), (Set{"", "ab", "abab", "ababab"}));
  EXPECT_EQ(enumerate(gbnf(R"(root ::= "x"+)"), 3, &truncated), (Set{"x", "xx", "xxx"}));
}

TEST(Gbnf, CharacterClassesCoverRangesAndEscapes) {
  EXPECT_EQ(language(R"(root ::= [a-c\-])"), (Set{"a", "b", "c", "-"}));
  EXPECT_EQ(language(R"(root ::= [\x41\u0042] "\n")"), (Set{"A\n", "B\n"}));
  EXPECT_EQ(language(R"(root ::= "\x4a\u00E9\U0001F600")"), (Set{"J\xC3\xA9\xF0\x9F\x98\x80"}));
}

TEST(Gbnf, NegatedClassesMatchWholeUtf8CharactersOnly) {
  auto a = gbnf(R"(root ::= [^a])");
  ASSERT_TRUE(a);
  Matcher m(a);
  EXPECT_FALSE(m.accepts("a"));
  EXPECT_TRUE(m.accepts("b"));
  EXPECT_TRUE(m.accepts("\xC3\xA9"));          // é
  EXPECT_TRUE(m.accepts("\xF0\x9F\x98\x80"));  // an emoji, four bytes
  EXPECT_FALSE(m.accepts("\x80"));              // a lone continuation byte
  EXPECT_FALSE(m.accepts("\xED\xA0\x80"));      // an encoded surrogate
  EXPECT_FALSE(m.accepts("\xC0\xAF"));          // an overlong encoding
  ASSERT_TRUE(m.advance("\xC3"));
  EXPECT_FALSE(m.is_complete());
  ASSERT_TRUE(m.advance("\xA9"));
  EXPECT_TRUE(m.is_complete());
}

TEST(Gbnf, DotMatchesAnyOneCharacter) {
  auto a = gbnf(R"(root ::= "<" . ">")");
  ASSERT_TRUE(a);
  Matcher m(a);
  EXPECT_TRUE(m.accepts("<\xE4\xB8\xAD>"));
  EXPECT_FALSE(m.accepts("<ab>"));
}

TEST(Gbnf, CommentsAndLineBreaksInsideRulesAreIgnored) {
  EXPECT_EQ(language("# a comment\nroot ::= (\n  \"a\" # first\n  | \"b\"\n)\n  | \"c\"\n"), (Set{"a", "b", "c"}));
}

TEST(Gbnf, RecursiveRulesNest) {
  bool truncated = false;
  EXPECT_EQ(enumerate(gbnf(R"g(root ::= "(" root ")" | "x")g"), 5, &truncated), (Set{"x", "(x)", "((x))"}));
  EXPECT_TRUE(truncated);
}

TEST(Gbnf, LongRightRecursiveListsMatch) {
  auto a = gbnf(R"(root ::= "a" root | "b")");
  ASSERT_TRUE(a);
  Matcher m(a);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(m.advance("a"));
  ASSERT_TRUE(m.advance("b"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.can_continue());
}

TEST(Gbnf, AmbiguousAlternativesAreOneLanguage) {
  EXPECT_EQ(language("root ::= a | b\na ::= \"x\" \"y\"?\nb ::= \"x\" \"y\""), (Set{"x", "xy"}));
}

TEST(Gbnf, RandomStringsOfAJsonGrammarAreJson) {
  // Exponents of two digits at most: the parser refuses numbers beyond a double's range.
  auto a = gbnf(R"(
root    ::= element
element ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ( ws | member ( "," member )* ) "}"
member  ::= ws string ws ":" element
array   ::= "[" ( ws | element ( "," element )* ) "]"
string  ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,2} )?
ws      ::= [ \t\n\r]?
)");
  ASSERT_TRUE(a);
  std::mt19937_64 rng(5);
  int parsed = 0;
  for (int i = 0; i < 300; ++i) {
    auto s = testing::random_bytes(a, rng, 400, 0.5);
    if (!s) continue;  // ran past the length bound: recursion has no limit here
    EXPECT_TRUE(nlohmann::json::accept(*s)) << *s;
    ++parsed;
  }
  EXPECT_GT(parsed, 100);
}

TEST(Gbnf, RandomStringsOfABracketGrammarBalance) {
  auto a = gbnf(R"g(root ::= group+
group ::= "(" group* ")" | "[" group* "]" | "x")g");
  ASSERT_TRUE(a);
  std::mt19937_64 rng(9);
  int checked = 0;
  for (int i = 0; i < 300; ++i) {
    auto s = testing::random_bytes(a, rng, 200, 0.5);
    if (!s) continue;
    std::string open;
    bool balanced = !s->empty();
    for (char c : *s) {
      if (c == '(' || c == '[') {
        open.push_back(c);
      } else if (c == ')' || c == ']') {
        balanced = balanced && !open.empty() && open.back() == (c == ')' ? '(' : '[');
        if (!open.empty()) open.pop_back();
      }
    }
    EXPECT_TRUE(balanced && open.empty()) << *s;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("root ::= \"a\"\nfoo ::= bar"), "gbnf 2:9: rule 'bar' is used but never defined");
  EXPECT_EQ(error_of("root ::= \"a"), "gbnf 1:10: string literal is never closed");
  EXPECT_EQ(error_of("root ::= [a-"), "gbnf 1:10: character class is never closed");
  EXPECT_EQ(error_of("root ::= (\"a\""), "gbnf 1:10: '(' is never closed");
  EXPECT_EQ(error_of("root ::= \"a\" )"), "gbnf 1:14: ')' without a matching '('");
  EXPECT_EQ(error_of("root := \"a\""), "gbnf 1:6: expected '::=' after the rule name 'root'");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "gbnf 1:11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= \"\\x4\""), "gbnf 1:11: escape needs 2 hex digits");
  EXPECT_EQ(error_of("root ::= [\\x4"), "gbnf 1:11: escape needs 2 hex digits");
  EXPECT_EQ(error_of("root ::= \"\\uD800\""), "gbnf 1:11: escape names no Unicode scalar value");
  EXPECT_EQ(error_of("root ::= \"a\xff\""), "gbnf 1:12: the text is not valid UTF-8 here");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}"), "gbnf 1:13: repeat {3,1} has its maximum below its minimum");
  EXPECT_EQ(error_of("root ::= [z-a]"), "gbnf 1:12: character range ends below where it starts");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""), "gbnf 2:1: rule 'root' is defined twice (first at 1:1)");
  EXPECT_EQ(error_of("a ::= \"x\""), "gbnf: the grammar defines no 'root' rule");
  EXPECT_EQ(error_of("root ::= <think>"), "gbnf 1:10: token references ('<...>', '!') are not supported");
}

TEST(Gbnf, LeftRecursionIsRefusedNamingTheRule) {
  EXPECT_EQ(error_of("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""),
            "rule 'expr' is left-recursive: it can call itself again before reading a byte");
  EXPECT_EQ(error_of("root ::= a\na ::= b? \"x\" | \"y\"\nb ::= a? \"z\""),
            "rule 'a' is left-recursive: it can call itself again before reading a byte");
}

TEST(Gbnf, AGrammarWithoutAFiniteStringIsRefused) {
  EXPECT_EQ(error_of("root ::= \"a\" root"),
            "the grammar admits no string: rule 'root' can never end (every way through it calls a rule without end)");
}

}  // namespace
}  // namespace kiln::grammar
