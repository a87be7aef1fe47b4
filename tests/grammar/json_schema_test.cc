// JSON Schema grammars. Per feature: seeded random generations over the real Qwen3 vocabulary
// (each step uniform among the tokens the mask allows, as a noise-producing model ends up under
// the constraint) always stop within a bound for bounded schemas and always validate under eval's
// JSON Schema check (written apart from the grammar layer, asserting formats); small schemas enumerate to exactly the expected texts; unsupported
// keywords are refused naming their JSON pointer.
#include <gtest/gtest.h>

#include "eval/json_schema_check.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace kiln::grammar {
namespace {

using Json = nlohmann::json;
using Set = std::set<std::string>;

std::shared_ptr<const Automaton> schema_automaton(const std::string& schema, const JsonSchemaOptions& options = {}) {
  return testing::compile_or_die(json_schema_grammar(std::string_view(schema), options));
}

// The whitespace runs outside strings, longest first.
size_t longest_whitespace_run(const std::string& text) {
  size_t longest = 0, run = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      longest = std::max(longest, ++run);
      continue;
    }
    run = 0;
    in_string = c == '"';
  }
  return longest;
}

// Parses `text`, failing on invalid JSON or a key repeated within one object.
std::optional<Json> parse_strictly(const std::string& text) {
  std::vector<std::set<std::string>> keys;
  bool repeated = false;
  Json::parser_callback_t cb = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second) repeated = true;
    return true;
  };
  Json v = Json::parse(text, cb, /*allow_exceptions=*/false);
  if (v.is_discarded()) {
    ADD_FAILURE() << "not JSON: " << text;
    return std::nullopt;
  }
  if (repeated) {
    ADD_FAILURE() << "a key repeats: " << text;
    return std::nullopt;
  }
  return v;
}

// Random generations over the Qwen3 vocabulary: each must stop within `max_tokens` (when the
// schema bounds the text) and validate. `feature` names the case in failures.
void expect_generations_validate(const std::string& feature, const std::string& schema_text, int walks, size_t max_tokens,
                                 bool bounded = true, const JsonSchemaOptions& options = {}) {
  SCOPED_TRACE(feature);
  auto vocab = testing::qwen3_vocabulary();
  ASSERT_TRUE(vocab);
  auto a = schema_automaton(schema_text, options);
  ASSERT_TRUE(a);
  auto masks = std::make_shared<const MaskCache>(a, vocab);
  const Json schema = Json::parse(schema_text);
  JsonSchemaCheckOptions check;
  check.assert_format = true;
  std::mt19937_64 rng(std::hash<std::string>{}(schema_text));
  int stopped = 0;
  for (int w = 0; w < walks; ++w) {
    const testing::TokenWalk walk = testing::random_tokens(masks, rng, max_tokens);
    if (::testing::Test::HasFailure()) return;
    if (!walk.stopped) {
      EXPECT_FALSE(bounded) << "a bounded schema's generation ran past " << max_tokens << " tokens: " << walk.text;
      continue;
    }
    ++stopped;
    auto v = parse_strictly(walk.text);
    if (!v) return;
    EXPECT_EQ(json_schema_violation(schema, *v, check).value_or(""), "") << walk.text;
    EXPECT_LE(longest_whitespace_run(walk.text), static_cast<size_t>(options.max_whitespace)) << walk.text;
  }
  EXPECT_GT(stopped, 0);
}

Set language(const std::string& schema, size_t max_len = 40, int max_digits = 16) {
  JsonSchemaOptions compact;
  compact.max_whitespace = 0;
  compact.max_digits = max_digits;
  auto a = schema_automaton(schema, compact);
  if (!a) return {};
  bool truncated = false;
  Set out = testing::enumerate(a, max_len, &truncated);
  EXPECT_FALSE(truncated) << schema << " has texts longer than " << max_len;
  return out;
}

std::string error_of(const std::string& schema) {
  auto g = json_schema_grammar(std::string_view(schema));
  return g.ok() ? "" : g.status().message();
}

bool accepts_whole(const std::shared_ptr<const Automaton>& a, const std::string& text) {
  Matcher m(a);
  return m.advance(text) && m.is_complete();
}

// --- every generation validates -------------------------------------------------------------

// One test for every feature, so that the vocabulary loads once: a table of cases, each named.
TEST(JsonSchemaGenerations, GenerationsOfEveryFeatureValidateAndBoundedOnesStop) {
  struct Case {
    const char* feature;
    std::string schema;
    int walks;
    size_t max_tokens;
    bool bounded = true;
  };
  const std::vector<Case> cases = {
      {"boolean", R"({"type": "boolean"})", 10, 10},
      {"null", R"({"type": "null"})", 3, 10},
      {"integer bounds", R"({"type": "integer", "minimum": -40, "maximum": 1234})", 20, 20},
      {"number bounds", R"({"type": "number", "minimum": -2, "exclusiveMaximum": 3})", 20, 60},
      {"string length", R"({"type": "string", "minLength": 1, "maxLength": 8})", 20, 40},
      {"type list, exclusive bounds", R"({"type": ["integer", "null"], "exclusiveMinimum": 0, "maximum": 9})", 20, 10},
      {"required and optional properties", R"({"type": "object", "properties": {
          "id": {"type": "integer", "minimum": 1, "maximum": 99},
          "name": {"type": "string", "minLength": 1, "maxLength": 6},
          "ok": {"type": "boolean"},
          "note": {"type": "string", "maxLength": 3}},
        "required": ["name"], "additionalProperties": false})", 30, 150},
      {"additional properties", R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"const": 1}},
        "required": ["a"], "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 3}})", 8, 400, false},
      {"prefixItems, items, minItems, maxItems", R"({"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": ["x", "y"]}],
        "items": {"type": "integer", "minimum": 0, "maximum": 20}, "minItems": 1, "maxItems": 5})", 30, 80},
      {"items false", R"({"type": "array", "prefixItems": [{"const": "a"}, {"const": "b"}], "items": false})", 10, 30},
      {"exact item count", R"({"type": "array", "items": {"type": "null"}, "minItems": 2, "maxItems": 2})", 5, 30},
      {"enum of every kind", R"({"enum": ["plain", "quo\"te", "back\\slash", "tab\t", "é ü 中文", 7, -1.5, true, null,
        [1, {"k": []}], {"a": {"b": null}}]})", 40, 40},
      {"const", R"({"const": {"nested": ["c", 1, false]}})", 5, 30},
      {"anyOf", R"({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 5}, {"type": "string", "maxLength": 2},
        {"type": "object", "properties": {"k": {"type": "null"}}, "required": ["k"]}]})", 30, 30},
      {"recursive $ref", R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
          "v": {"type": "integer", "minimum": 0, "maximum": 9},
          "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        "required": ["v", "next"]}}})", 20, 2000, false},
      {"anchored pattern", R"({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,4}$"})", 20, 30},
      {"pattern of escaped characters", R"({"type": "string", "pattern": "^(\"|\\\\|[a-c]){1,4}$"})", 20, 30},
      {"format date", R"({"type": "string", "format": "date"})", 10, 100},
      {"format time", R"({"type": "string", "format": "time"})", 10, 100},
      {"format date-time", R"({"type": "string", "format": "date-time"})", 10, 100},
      {"format duration", R"({"type": "string", "format": "duration"})", 10, 200},
      {"format uuid", R"({"type": "string", "format": "uuid"})", 10, 100},
      {"format ipv4", R"({"type": "string", "format": "ipv4"})", 10, 100},
      {"format ipv6", R"({"type": "string", "format": "ipv6"})", 10, 200},
      {"format email", R"({"type": "string", "format": "email"})", 10, 600},
      {"format hostname", R"({"type": "string", "format": "hostname"})", 10, 600},
      {"format uri", R"({"type": "string", "format": "uri"})", 10, 2000, false},
      {"empty schema: any JSON", "{}", 10, 300, false},
  };
  for (const Case& c : cases) expect_generations_validate(c.feature, c.schema, c.walks, c.max_tokens, c.bounded);
  const char* spaced = R"({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "boolean"}},
    "required": ["a"]}, "maxItems": 3})";
  for (int limit : {0, 1, 3}) {
    JsonSchemaOptions options;
    options.max_whitespace = limit;
    expect_generations_validate("whitespace bound " + std::to_string(limit), spaced, 15, 200, true, options);
  }
}

// --- small schemas enumerate to exactly their texts --------------------------------------------

TEST(JsonSchemaLanguage, BooleanAndNullAreTheirLiterals) {
  EXPECT_EQ(language(R"({"type": "boolean"})"), (Set{"true", "false"}));
  EXPECT_EQ(language(R"({"type": ["null", "boolean"]})"), (Set{"null", "true", "false"}));
}

TEST(JsonSchemaLanguage, EnumsAreTheirValuesCompactlyWritten) {
  EXPECT_EQ(language(R"({"enum": [1, "a\"b", null, [1, 2], {"k": "v"}]})"),
            (Set{"1", "\"a\\\"b\"", "null", "[1,2]", "{\"k\":\"v\"}"}));
  EXPECT_EQ(language(R"({"type": "string", "enum": ["x", 1, "y"]})"), (Set{"\"x\"", "\"y\""}));
}

TEST(JsonSchemaLanguage, BoundedIntegersAreEveryIntegerInRange) {
  Set expected;
  for (int i = -13; i <= 112; ++i) expected.insert(std::to_string(i));
  EXPECT_EQ(language(R"({"type": "integer", "minimum": -13, "maximum": 112})"), expected);
  EXPECT_EQ(language(R"({"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 9})"), (Set{"6", "7", "8"}));
  EXPECT_EQ(language(R"({"type": "integer", "minimum": 0.5, "maximum": 3.7})"), (Set{"1", "2", "3"}));
  EXPECT_EQ(language(R"({"type": "integer", "minimum": -1, "maximum": -1})"), (Set{"-1"}));
}

// Decimal texts with at most one fraction digit, no exponent and no leading zeros, whose value
// passes `keep`.
template <typename Keep>
Set decimals(int lo, int hi, Keep keep) {
  Set out;
  for (int sign : {1, -1}) {
    for (int whole = 0; whole <= std::max(std::abs(lo), std::abs(hi)) + 1; ++whole) {
      const std::string w = (sign < 0 ? "-" : "") + std::to_string(whole);
      if (sign < 0 && whole == 0) {
        for (int f = 1; f <= 9; ++f) {  // -0.f, but never -0 or -0.0
          if (keep(-f / 10.0)) out.insert(w + "." + std::to_string(f));
        }
        continue;
      }
      if (keep(sign * whole)) out.insert(w);
      for (int f = 0; f <= 9; ++f) {
        if (keep(sign * (whole + f / 10.0))) out.insert(w + "." + std::to_string(f));
      }
    }
  }
  return out;
}

TEST(JsonSchemaLanguage, BoundedNumbersAreEveryDecimalInRange) {
  EXPECT_EQ(language(R"({"type": "number", "minimum": -1, "maximum": 2})", 40, 1),
            decimals(-1, 2, [](double x) { return x >= -1 && x <= 2; }));
  EXPECT_EQ(language(R"({"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1})", 40, 1),
            decimals(-1, 1, [](double x) { return x > -1 && x < 1; }));
  EXPECT_EQ(language(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1})", 40, 1),
            decimals(0, 1, [](double x) { return x > 0 && x <= 1; }));
}

TEST(JsonSchemaLanguage, ObjectsWriteTheirPropertiesInOrderWithOptionalOnesLeftOut) {
  EXPECT_EQ(language(R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}, "required": ["a"]})"),
            (Set{"{\"a\":true}", "{\"a\":false}", "{\"a\":true,\"b\":null}", "{\"a\":false,\"b\":null}"}));
  EXPECT_EQ(language(R"({"properties": {"a": {"const": 1}, "b": {"const": 2}, "c": {"const": 3}}, "required": ["b"]})"),
            (Set{"{\"b\":2}", "{\"a\":1,\"b\":2}", "{\"b\":2,\"c\":3}", "{\"a\":1,\"b\":2,\"c\":3}"}));
  EXPECT_EQ(language(R"({"type": "object", "properties": {"x": {"const": 0}, "y": {"const": 1}}})"),
            (Set{"{}", "{\"x\":0}", "{\"y\":1}", "{\"x\":0,\"y\":1}"}));
  EXPECT_EQ(language(R"({"type": "object"})"), (Set{"{}"}));
}

TEST(JsonSchemaLanguage, ArraysHaveTheirPrefixThenItemsWithinTheirBounds) {
  EXPECT_EQ(language(R"({"prefixItems": [{"const": "p"}], "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2})"),
            (Set{"[\"p\"]", "[\"p\",true]", "[\"p\",false]"}));
  EXPECT_EQ(language(R"({"type": "array", "items": {"const": 0}, "maxItems": 2})"), (Set{"[]", "[0]", "[0,0]"}));
  EXPECT_EQ(language(R"({"type": "array", "prefixItems": [{"const": 1}, {"const": 2}], "items": false})"),
            (Set{"[]", "[1]", "[1,2]"}));
  EXPECT_EQ(language(R"({"type": "array", "prefixItems": [{"const": 1}, {"const": 2}], "minItems": 2, "maxItems": 2})"),
            (Set{"[1,2]"}));
}

TEST(JsonSchemaLanguage, AnyOfAndReferencesUniteTheirOptions) {
  EXPECT_EQ(language(R"({"anyOf": [{"const": 1}, {"type": "boolean"}, {"$ref": "#/$defs/n"}], "$defs": {"n": {"type": "null"}}})"),
            (Set{"1", "true", "false", "null"}));
  EXPECT_EQ(language(R"({"allOf": [{"$ref": "#/definitions/x"}], "definitions": {"x": {"enum": ["a"]}}})"), (Set{"\"a\""}));
}

TEST(JsonSchemaLanguage, StringBoundsAndPatternsAreTheirStrings) {
  EXPECT_EQ(language(R"({"type": "string", "pattern": "^[ab]{1,2}$"})"),
            (Set{"\"a\"", "\"b\"", "\"aa\"", "\"ab\"", "\"ba\"", "\"bb\""}));
  EXPECT_EQ(language(R"({"type": "string", "pattern": "^(\"|\\\\)$"})"), (Set{"\"\\\"\"", "\"\\\\\""}));
  auto a = schema_automaton(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  ASSERT_TRUE(a);
  EXPECT_TRUE(accepts_whole(a, "\"ab\""));
  EXPECT_TRUE(accepts_whole(a, "\"\\n\\\"é\""));  // three characters, two of them escaped
  EXPECT_FALSE(accepts_whole(a, "\"a\""));
  EXPECT_FALSE(accepts_whole(a, "\"abcd\""));
  EXPECT_FALSE(accepts_whole(a, "\"a\nb\""));  // a raw control character
}

TEST(JsonSchemaLanguage, UnanchoredPatternsAllowTextAroundTheirMatch) {
  auto search = schema_automaton(R"({"type": "string", "pattern": "ab[0-9]"})");
  ASSERT_TRUE(search);
  EXPECT_TRUE(accepts_whole(search, "\"ab1\""));
  EXPECT_TRUE(accepts_whole(search, "\"x\\\"ab2yz\""));
  EXPECT_FALSE(accepts_whole(search, "\"ab\""));
  EXPECT_FALSE(accepts_whole(search, "\"a b3\""));
  auto prefix = schema_automaton(R"({"type": "string", "pattern": "^ab"})");
  ASSERT_TRUE(prefix);
  EXPECT_TRUE(accepts_whole(prefix, "\"abc\""));
  EXPECT_FALSE(accepts_whole(prefix, "\"cab\""));
  auto suffix = schema_automaton(R"({"type": "string", "pattern": "ab$"})");
  ASSERT_TRUE(suffix);
  EXPECT_TRUE(accepts_whole(suffix, "\"cab\""));
  EXPECT_FALSE(accepts_whole(suffix, "\"abc\""));
}

TEST(JsonSchemaLanguage, AdditionalPropertiesNeverRepeatADeclaredName) {
  auto a = schema_automaton(R"({"properties": {"a": {"const": 1}, "ab": {"const": 2}}, "required": ["a"],
    "additionalProperties": {"const": 0}})",
                            JsonSchemaOptions{0, 16});
  ASSERT_TRUE(a);
  EXPECT_TRUE(accepts_whole(a, R"({"a":1,"b":0})"));
  EXPECT_TRUE(accepts_whole(a, R"({"a":1,"abc":0,"":0,"\u00e9":0})") == false);  // only the canonical é is written
  EXPECT_TRUE(accepts_whole(a, "{\"a\":1,\"abc\":0,\"\":0,\"\xC3\xA9\":0}"));
  EXPECT_TRUE(accepts_whole(a, R"({"a":1,"ab":2,"x":0})"));
  EXPECT_FALSE(accepts_whole(a, R"({"a":1,"a":0})"));
  EXPECT_FALSE(accepts_whole(a, R"({"a":1,"ab":0})"));
  EXPECT_FALSE(accepts_whole(a, R"({"a":1,"x":1})"));
}

TEST(JsonSchemaLanguage, FormatsAcceptTheirFormAndRefuseOthers) {
  auto date = schema_automaton(R"({"type": "string", "format": "date"})");
  ASSERT_TRUE(date);
  EXPECT_TRUE(accepts_whole(date, "\"2024-02-29\""));
  EXPECT_FALSE(accepts_whole(date, "\"2024-13-01\""));
  EXPECT_FALSE(accepts_whole(date, "\"24-01-01\""));
  auto uuid = schema_automaton(R"({"type": "string", "format": "uuid"})");
  ASSERT_TRUE(uuid);
  EXPECT_TRUE(accepts_whole(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(accepts_whole(uuid, "\"123e4567e89b12d3a456426614174000\""));
  auto ipv6 = schema_automaton(R"({"type": "string", "format": "ipv6"})");
  ASSERT_TRUE(ipv6);
  for (const char* ok : {"\"::1\"", "\"::\"", "\"fe80::1:2\"", "\"1:2:3:4:5:6:7:8\"", "\"1::\""}) EXPECT_TRUE(accepts_whole(ipv6, ok)) << ok;
  for (const char* bad : {"\"1::2::3\"", "\"1:2:3:4:5:6:7\"", "\"12345::\"", "\":1\""}) EXPECT_FALSE(accepts_whole(ipv6, bad)) << bad;
  auto duration = schema_automaton(R"({"type": "string", "format": "duration"})");
  ASSERT_TRUE(duration);
  for (const char* ok : {"\"P1Y2M3DT4H5M6S\"", "\"PT1M\"", "\"P2W\"", "\"P1D\""}) EXPECT_TRUE(accepts_whole(duration, ok)) << ok;
  for (const char* bad : {"\"P\"", "\"PT\"", "\"P1H\"", "\"P1DT\"", "\"P1M1Y\""}) EXPECT_FALSE(accepts_whole(duration, bad)) << bad;
}

// --- refusals name the path ----------------------------------------------------------------

TEST(JsonSchemaErrors, UnsupportedKeywordsAreRefusedNamingTheirPath) {
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 5}}})"),
            "/properties/age/multipleOf is not supported");
  EXPECT_EQ(error_of(R"({"oneOf": [{"type": "string"}]})"), "/oneOf is not supported");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"uniqueItems": true}})"), "/items/uniqueItems is not supported");
  EXPECT_EQ(error_of(R"({"type": "object", "patternProperties": {}})"), "/patternProperties is not supported");
  EXPECT_EQ(error_of(R"({"type": "string", "frobnicate": 1})"), "/frobnicate is not supported: not a keyword this compiler knows");
  EXPECT_EQ(error_of(R"({"anyOf": [{"type": "string", "format": "iri"}]})"),
            "/anyOf/0/format is not supported: the format 'iri' is unknown here");
  EXPECT_EQ(error_of(R"({"properties": {"n": {"type": "number", "maximum": 2.5}}})"),
            "/properties/n/maximum is not supported: a number's bounds must be whole numbers to be written as a grammar");
  EXPECT_EQ(error_of(R"({"$ref": "https://example.com/s.json"})"),
            "/$ref is not supported: only references inside the schema ('#...') are; 'https://example.com/s.json' is not one");
  EXPECT_EQ(error_of(R"j({"type": "string", "pattern": "a(?=b)"})j"),
            "/pattern: regex 'a(?=b)': lookahead is not supported (not a regular language) at offset 1");
  EXPECT_EQ(error_of(R"({"type": "array", "maxItems": 100000})"),
            "/maxItems is not supported above 10000 (each count unrolls into the grammar)");
  EXPECT_EQ(error_of(R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})"), "/allOf is not supported: only with exactly one schema");
  EXPECT_EQ(error_of(R"({"$ref": "#/$defs/x", "maxLength": 2, "$defs": {"x": {}}})"),
            "/maxLength is not supported: together with '$ref'");
  EXPECT_EQ(error_of(R"({"type": "string", "format": "date", "maxLength": 5})"),
            "/format is not supported: together with a pattern or length bounds");
}

TEST(JsonSchemaErrors, MalformedSchemasAreErrorsNamingTheirPath) {
  EXPECT_EQ(error_of(R"({"type": "text"})"), "/type is not a JSON type (null, boolean, integer, number, string, object, array)");
  EXPECT_EQ(error_of(R"({"properties": {"a": 5}})"), "/properties/a is not a schema (an object or a boolean)");
  EXPECT_EQ(error_of(R"({"properties": {"a": {}}, "required": ["b"]})"),
            "/required/0 is not supported: it names 'b', which properties does not define");
  EXPECT_EQ(error_of(R"({"$ref": "#/$defs/missing"})"), "/$ref '#/$defs/missing' points at nothing in the schema");
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 5, "maximum": 4})"), "/ bounds leave no integer");
  EXPECT_EQ(error_of(R"({"type": "string", "minLength": -1})"), "/minLength must be a non-negative integer");
  EXPECT_EQ(error_of("{\"type\": "), "the JSON schema is not valid JSON: " +
                                         error_of("{\"type\": ").substr(std::string("the JSON schema is not valid JSON: ").size()));
}

TEST(JsonSchemaErrors, ASchemaWithoutAnyFiniteValueIsRefused) {
  auto g = json_schema_grammar(std::string_view(R"({"$ref": "#/$defs/a", "$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}})"));
  ASSERT_TRUE(g.ok());
  auto a = compile_grammar(*g);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(),
            "the grammar admits no string: rule 'root' can never end (every way through it calls a rule without end)");
}

TEST(JsonSchemaErrors, UnsupportedMeansKUnsupportedAndMalformedMeansKInvalidArgument) {
  EXPECT_EQ(json_schema_grammar(std::string_view(R"({"not": {}})")).status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(json_schema_grammar(std::string_view(R"({"type": 3})")).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::grammar
