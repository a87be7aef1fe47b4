// Each scorer over a table of (expected, output, verdict) rows written by hand: whitespace and
// case, numeric tolerance with "1,000", "1e3" and trailing text, malformed JSON, multiple-choice
// letters in prose, regexes, composites, reasoning blocks, and auto-detection.
#include <gtest/gtest.h>

#include "eval/scorer.h"

namespace kiln {
namespace {

using json = nlohmann::json;

ScorerSpec spec(const json& j) {
  ScorerSpec s;
  auto e = parse_scorer(j, "scorer", s);
  EXPECT_FALSE(e) << j.dump() << ": " << (e ? e->field + ": " + e->message : "");
  return s;
}

struct Row {
  json scorer;
  json expected;
  std::string output;
  bool passed;
};

TEST(Scorer, TableOfAnswers) {
  const Row rows[] = {
      // exact: whitespace collapsed, case folded, one trailing period ignored
      {"exact", "Paris", "Paris", true},
      {"exact", "Paris", "  paris \n", true},
      {"exact", "New York", "new\t\tyork.", true},
      {"exact", "Paris", "Paris, France", false},
      {{{"type", "exact"}, {"case_sensitive", true}}, "Paris", "paris", false},
      {{{"type", "exact"}, {"case_sensitive", true}}, "Paris", " Paris ", true},
      // contains
      {"contains", "paris", "The capital is PARIS.", true},
      {"contains", "new york", "It is New   York city", true},
      {"contains", "Lyon", "The capital is Paris.", false},
      {{{"type", "contains"}, {"case_sensitive", true}}, "paris", "PARIS", false},
      // regex: searched, case-sensitive unless told
      {"regex", "^\\d{3}-\\d{4}$", "555-1234", true},
      {"regex", "colou?r", "my favourite color", true},
      {"regex", "Color", "color", false},
      {{{"type", "regex"}, {"case_sensitive", false}}, "Color", "color", true},
      {{{"type", "regex"}, {"pattern", "swor?dfish"}}, "ignored", "swordfish!", true},
      // regex: PCRE2 syntax where it differs from ECMAScript (docs/evals.md "Patterns")
      {"regex", "^42$", "42\n", true},                     // $ also before a final newline
      {"regex", "^42\\z", "42\n", false},
      {"regex", "(?i)paris", "PARIS", true},               // inline flags
      {"regex", "(?<=answer: )B", "the answer: B", true},  // lookbehind
      {"regex", "^\\w+$", "na\u00efve", true},             // \w is Unicode
      {"regex", "a.b", "a\rb", true},                      // . matches \r
      // numeric_tolerance: the output's last number
      {"numeric_tolerance", "1000", "1,000", true},
      {"numeric_tolerance", "1000", "1e3", true},
      {"numeric_tolerance", "1000", "The total is 1,000 apples.", true},
      {"numeric_tolerance", "1,000", "1000.0", true},
      {"numeric_tolerance", "42", "I think 41, no wait: 42", true},
      {"numeric_tolerance", "42", "42 or maybe 43", false},
      {"numeric_tolerance", "3.14159", "3.14", false},
      {{{"type", "numeric_tolerance"}, {"tolerance", 0.01}}, "3.14159", "pi is about 3.14", true},
      {{{"type", "numeric_tolerance"}, {"relative", 0.05}}, "200", "about 209", true},
      {{{"type", "numeric_tolerance"}, {"relative", 0.05}}, "200", "about 211", false},
      {"numeric_tolerance", "-2.5", "x = -2.5", true},
      {"numeric_tolerance", "7", "no idea", false},
      // multiple_choice: letters in prose
      {"multiple_choice", "B", "The answer is (B).", true},
      {"multiple_choice", "B", "b", true},
      {"multiple_choice", "B", "B.", true},
      {"multiple_choice", "C", "Answer: c", true},
      {"multiple_choice", "B", "(A) is wrong, so (B)", true},
      {"multiple_choice", "B", "The answer is (C).", false},
      {"multiple_choice", "(D)", "I pick D", true},
      {"multiple_choice", "A", "none of these", false},
      // json_validity: with a structure to match, without one, malformed
      {"json_validity", "", "{\"a\": 1}", true},
      {"json_validity", "", "{\"a\": 1", false},
      {"json_validity", "", "{'a': 1}", false},
      {"json_validity", "{\"a\": 1, \"b\": [1, 2]}", "{\"b\": [1, 2], \"a\": 1}", true},
      {"json_validity", "{\"a\": 1}", "```json\n{\"a\": 1}\n```", true},
      {"json_validity", "{\"a\": 1}", "{\"a\": 2}", false},
      {"json_validity", json{{"a", 1}}, "{\"a\":1}", true},
      // composites, each member may bring its own expected
      {{{"type", "all"}, {"of", {{{"type", "contains"}, {"expected", "paris"}}, {{"type", "regex"}, {"expected", "\\.$"}}}}}, "",
       "It is Paris.", true},
      {{{"type", "all"}, {"of", {{{"type", "contains"}, {"expected", "paris"}}, {{"type", "regex"}, {"expected", "\\.$"}}}}}, "",
       "It is Paris", false},
      {{{"type", "any"}, {"of", {"exact", {{"type", "contains"}, {"expected", "lyon"}}}}}, "Paris", "Lyon!", true},
      {{{"type", "any"}, {"of", {"exact", {{"type", "contains"}, {"expected", "lyon"}}}}}, "Paris", "Nice", false},
      // a reasoning block is never the answer
      {"exact", "4", "<think>2+2 is 5? no</think>\n\n4", true},
      {"contains", "5", "<think>maybe 5</think>4", false},
      {"exact", "4", "<think>still thinking about 4", false},
  };
  for (const Row& r : rows) {
    ScoreResult s = score(spec(r.scorer), r.expected, r.output);
    EXPECT_EQ(s.passed, r.passed) << r.scorer.dump() << " expected=" << r.expected.dump() << " output=\"" << r.output
                                  << "\" detail=" << s.detail;
    EXPECT_FALSE(s.detail.empty());
  }
}

TEST(Scorer, ARegexThatHitsItsLimitFailsTheExampleAndSaysWhich) {
  const std::string output = std::string(10'000, 'a') + "b";
  const std::string reason = "the pattern '(a+)+$' exceeded its match limit (1,000,000 steps) on 10,001 bytes of text";
  ScoreResult from_expected = score(spec("regex"), "(a+)+$", output);
  EXPECT_FALSE(from_expected.passed);
  EXPECT_EQ(from_expected.detail, reason);
  ScoreResult from_pattern = score(spec({{"type", "regex"}, {"pattern", "(a+)+$"}}), "ignored", output);
  EXPECT_FALSE(from_pattern.passed);
  EXPECT_EQ(from_pattern.detail, reason);
  // In a composite the member fails and the others still decide.
  ScoreResult any = score(spec({{"type", "any"}, {"of", {{{"type", "regex"}, {"pattern", "(a+)+$"}}, "contains"}}}), "aaab",
                          output);
  EXPECT_TRUE(any.passed);
  EXPECT_NE(any.detail.find("regex failed (" + reason + ")"), std::string::npos) << any.detail;
}

TEST(Scorer, AnUncompilablePatternIsRefusedNamingTheOffset) {
  ScorerSpec s;
  auto e = parse_scorer({{"type", "regex"}, {"pattern", "ab(c"}}, "scorer", s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "scorer.pattern");
  EXPECT_EQ(e->message.rfind("the pattern 'ab(c' does not compile at offset 4: ", 0), 0u) << e->message;
  // ECMAScript's \u escape is not PCRE2's (\x{...} is).
  EXPECT_TRUE(parse_scorer({{"type", "regex"}, {"pattern", "caf\\u00e9"}}, "scorer", s));
  EXPECT_FALSE(parse_scorer({{"type", "regex"}, {"pattern", "caf\\x{e9}"}}, "scorer", s));
  auto long_one = parse_scorer({{"type", "regex"}, {"pattern", std::string(5000, 'a')}}, "scorer", s);
  ASSERT_TRUE(long_one);
  EXPECT_NE(long_one->message.find("over the cap of 4,096 bytes"), std::string::npos) << long_one->message;
}

TEST(Scorer, AutoDetectionFollowsTheDocumentedRule) {
  EXPECT_EQ(auto_scorer("42").type, ScorerType::kNumericTolerance);
  EXPECT_EQ(auto_scorer("1,000").type, ScorerType::kNumericTolerance);
  EXPECT_EQ(auto_scorer(" -2.5e3 ").type, ScorerType::kNumericTolerance);
  EXPECT_EQ(auto_scorer("B").type, ScorerType::kMultipleChoice);
  EXPECT_EQ(auto_scorer("(C)").type, ScorerType::kMultipleChoice);
  EXPECT_EQ(auto_scorer("F").type, ScorerType::kExact);
  EXPECT_EQ(auto_scorer("{\"a\": 1}").type, ScorerType::kJsonValidity);
  EXPECT_EQ(auto_scorer(json::array({1, 2})).type, ScorerType::kJsonValidity);
  EXPECT_EQ(auto_scorer("Paris").type, ScorerType::kExact);
  EXPECT_EQ(auto_scorer("42 apples").type, ScorerType::kExact);
}

TEST(Scorer, NumbersAreReadAsDocumented) {
  EXPECT_EQ(parse_number_exact("1,000").value(), 1000.0);
  EXPECT_EQ(parse_number_exact("1e3").value(), 1000.0);
  EXPECT_EQ(parse_number_exact(".5").value(), 0.5);
  EXPECT_FALSE(parse_number_exact("1,00").value());
  EXPECT_FALSE(parse_number_exact("12 apples").value());
  EXPECT_EQ(last_number("from 3 to 1,234,567.5 apples.").value(), 1234567.5);
  EXPECT_FALSE(last_number("none").value());
  // Digits are ASCII: another script's digits are not a number strtod could read.
  EXPECT_FALSE(last_number("\xd9\xa3").value());
  EXPECT_EQ(expected_number("about 12 or 13").value(), 13.0);
}

TEST(Scorer, BadScorersNameTheField) {
  struct Bad { json j; std::string field; };
  const Bad bad[] = {
      {"fuzzy", "scorer"},
      {{{"type", "fuzzy"}}, "scorer.type"},
      {{{"tolerance", 1}}, "scorer.type"},
      {{{"type", "numeric_tolerance"}, {"tolerance", -1}}, "scorer.tolerance"},
      {{{"type", "regex"}, {"pattern", "(unclosed"}}, "scorer.pattern"},
      {{{"type", "exact"}, {"pattern", "x"}}, "scorer.pattern"},
      {{{"type", "all"}}, "scorer.of"},
      {{{"type", "any"}, {"of", {"exact", "nope"}}}, "scorer.of[1]"},
      {"all", "scorer"},
      {42, "scorer"},
  };
  for (const Bad& b : bad) {
    ScorerSpec s;
    auto e = parse_scorer(b.j, "scorer", s);
    ASSERT_TRUE(e) << b.j.dump();
    EXPECT_EQ(e->field, b.field) << b.j.dump() << ": " << e->message;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Scorer, JsonSchemaValidatesTheOutputAgainstTheScorersSchema) {
  ScorerSpec s;
  ASSERT_FALSE(parse_scorer(nlohmann::json::parse(R"({"type": "json_schema", "schema": {
      "type": "object", "required": ["name", "tags"], "additionalProperties": false,
      "properties": {"name": {"type": "string", "maxLength": 5},
                     "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                     "age": {"type": "integer", "minimum": 0}}}})"),
                            "scorer", s)
                   .has_value());
  EXPECT_EQ(s.type, ScorerType::kJsonSchema);
  // Key order, white space and a code fence do not matter; validity does.
  EXPECT_TRUE(score(s, "", "```json\n{ \"tags\": [\"b\"],\n  \"name\": \"Ann\" }\n```").passed);
  EXPECT_TRUE(score(s, "", R"({"name": "Ann", "tags": [], "age": 4})").passed);
  const std::vector<std::pair<std::string, std::string>> failing = {
      {R"({"name": "Annabel", "tags": []})", "/name"},
      {R"({"name": "Ann", "tags": ["c"]})", "/tags/0"},
      {R"({"name": "Ann", "tags": ["a", "b", "a"]})", "/tags"},
      {R"({"name": "Ann"})", "required \"tags\""},
      {R"({"name": "Ann", "tags": [], "age": -1})", "/age"},
      {R"({"name": "Ann", "tags": [], "x": 1})", "/x"},
      {R"({"name": "Ann", "tags": [], "age": 1.5})", "/age"},
      {R"(not json)", "JSON"},
  };
  for (const auto& [out, names] : failing) {
    const ScoreResult r = score(s, "", out);
    EXPECT_FALSE(r.passed) << out;
    EXPECT_NE(r.detail.find(names), std::string::npos) << out << " -> " << r.detail;
  }
}

TEST(Scorer, JsonSchemaTakesTheExpectedAnswerAsTheSchemaWhenTheScorerHasNone) {
  ScorerSpec s;
  ASSERT_FALSE(parse_scorer("json_schema", "scorer", s).has_value());
  const nlohmann::json schema = nlohmann::json::parse(
      R"({"$defs": {"n": {"type": "number", "exclusiveMaximum": 10}}, "type": "array", "items": {"$ref": "#/$defs/n"}})");
  EXPECT_TRUE(score(s, schema, "[1, 2.5, 9.99]").passed);
  const ScoreResult r = score(s, schema, "[1, 10]");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.detail.find("/1"), std::string::npos) << r.detail;
  EXPECT_FALSE(score(s, "not a schema", "[1]").passed);
  ScorerSpec bad;
  const auto e = parse_scorer(nlohmann::json::parse(R"({"type": "json_schema", "schema": 3})"), "examples[2].scorer", bad);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "examples[2].scorer.schema");
}

}  // namespace
}  // namespace kiln
