// Strict JSON: what is accepted, and that each rejection names the JSON path at fault.
#include <gtest/gtest.h>

#include "qualify/strict_json.h"

namespace kiln::qualify {
namespace {

struct Rejection {
  const char* text;
  const char* path_and_reason;  // a substring the error message must contain
};

class StrictJsonRejects : public ::testing::TestWithParam<Rejection> {};

TEST_P(StrictJsonRejects, NamesPathAndReason) {
  Result<JsonValue> r = parse_strict_json(GetParam().text);
  ASSERT_FALSE(r.ok()) << GetParam().text;
  EXPECT_EQ(r.status().code(), ErrorCode::kFormatError);
  EXPECT_NE(r.status().message().find(GetParam().path_and_reason), std::string::npos) << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, StrictJsonRejects,
    ::testing::Values(Rejection{R"({"a": 1, "a": 2})", "$.a: duplicate key \"a\""},
                      Rejection{R"({"x": {"y": [1, {"k": 1, "k": 1}]}})", "$.x.y[1].k: duplicate key"},
                      Rejection{R"({"v": NaN})", "$.v: NaN and Infinity"},
                      Rejection{R"({"v": -Infinity})", "$.v: NaN and Infinity"},
                      Rejection{R"([1, Infinity])", "$[1]: NaN and Infinity"},
                      Rejection{R"({"v": 1e400})", "$.v: number 1e400 overflows"},
                      Rejection{R"({"v": 0.1000000000000000000001})", "$.v: number 0.1000000000000000000001 does not round-trip"},
                      Rejection{R"({"v": 9007199254740993})", "$.v: number 9007199254740993 does not round-trip"},
                      Rejection{R"({"v": 1e-400})", "$.v: number 1e-400 overflows or underflows"},
                      Rejection{R"({"v": 01})", "$.v: leading zeros"},
                      Rejection{R"({"v": 1.})", "$.v: invalid number"},
                      Rejection{R"({"v": [1, 2,]})", "$.v: trailing comma in array"},
                      Rejection{R"({"v": 1,})", "$: trailing comma in object"},
                      Rejection{R"({"v": "a\qb"})", "$.v: invalid string: forbidden character after backslash"},
                      Rejection{"{\"v\": \"a\tb\"}", "$.v: invalid string: control character U+0009 (HT) must be escaped"},
                      Rejection{R"({"v": "\ud800"})", "$.v: invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
                      Rejection{"{\"v\": \"\xC0\x80\"}", "$.v: invalid string: ill-formed UTF-8 byte"},
                      Rejection{R"({"v": 1} {})", "$: unexpected content after the document"},
                      Rejection{R"({"v": tru})", "$.v: invalid literal"},
                      Rejection{R"({"a b": {"c": x}})", "$[\"a b\"].c: invalid literal"},
                      Rejection{"", "$: unexpected end of input"},
                      Rejection{R"({"a": 1, "\u0061": 2})", "$.a: duplicate key \"a\""},
                      Rejection{R"({"v": -1e400})", "$.v: number -1e400 overflows"},
                      Rejection{R"([18446744073709551615])", "$[0]: number 18446744073709551615 does not round-trip"},
                      Rejection{R"([0, -01])", "$[1]: leading zeros"},
                      Rejection{"00", "$: leading zeros"},
                      Rejection{"1 2", "$: unexpected content after the document"},
                      Rejection{R"({"v": [1 2]})", "$.v: unexpected number literal; expected ']'"},
                      Rejection{R"({"v" 1})", "$.v: unexpected number literal; expected ':'"},
                      Rejection{R"({"v": 1 "w": 2})", "$: unexpected string literal; expected '}'"},
                      Rejection{R"({"v": [true, "\u12"]})", "$.v[1]: invalid string: '\\u' must be followed by 4 hex digits"},
                      Rejection{"{\"\xFF\": 1}", "$: invalid string: ill-formed UTF-8 byte"},
                      Rejection{R"(["abc)", "$[0]: invalid string: missing closing quote"}));

TEST(StrictJson, AcceptsExactNumbersAndKeepsIntegers) {
  Result<JsonValue> r = parse_strict_json(R"({"i": -42, "f": 0.1, "e": 1.5e3, "big": 9007199254740992, "z": -0})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->find("i")->is_integer);
  EXPECT_EQ(r->find("i")->integer, -42);
  EXPECT_FALSE(r->find("f")->is_integer);
  EXPECT_DOUBLE_EQ(r->find("f")->number, 0.1);
  EXPECT_DOUBLE_EQ(r->find("e")->number, 1500.0);
  EXPECT_EQ(r->find("big")->integer, int64_t{9007199254740992});
  EXPECT_EQ(r->find("z")->number, 0.0);
}

TEST(StrictJson, KeepsKeyOrderAndDecodesEscapes) {
  Result<JsonValue> r = parse_strict_json(R"({"b": "\u00e9\ud83d\ude00\n", "a": [true, null]})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->object.size(), 2u);
  EXPECT_EQ(r->object[0].first, "b");
  EXPECT_EQ(r->object[0].second.string, "\xC3\xA9\xF0\x9F\x98\x80\n");
  EXPECT_EQ(to_json_text(*r), "{\"b\":\"\xC3\xA9\xF0\x9F\x98\x80\\n\",\"a\":[true,null]}");
}

TEST(StrictJson, WrittenNumbersReadBackEqual) {
  JsonValue v = JsonValue::make_number(0.30000000000000004);
  Result<JsonValue> back = parse_strict_json(to_json_text(v));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->number, 0.30000000000000004);
}

// Found by the strict JSON fuzz target: -0e3 was written "-0", which read back as the integer 0
// and was written "0" (a receipt rewritten would not keep its bytes).
TEST(StrictJson, NegativeZeroKeepsItsSignThroughTheWriter) {
  Result<JsonValue> r = parse_strict_json("[-0, -0e3, -0.0, 0]");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->array[0].is_integer);
  EXPECT_TRUE(r->array[3].is_integer);
  const std::string text = to_json_text(*r);
  EXPECT_EQ(text, "[-0,-0,-0,0]");
  Result<JsonValue> back = parse_strict_json(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(to_json_text(*back), text);
}

// A number is an integer exactly when written without fraction or exponent and fitting int64;
// unsigned values above that stay doubles (when they round-trip).
TEST(StrictJson, IntegersAreThoseWrittenWithoutFractionOrExponentThatFitInt64) {
  Result<JsonValue> r =
      parse_strict_json("[100, 1e2, 100.0, -1000000000000000000, 10000000000000000000, 100000000000000000000]");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::vector<JsonValue>& a = r->array;
  EXPECT_TRUE(a[0].is_integer);
  EXPECT_EQ(a[0].integer, 100);
  EXPECT_FALSE(a[1].is_integer);
  EXPECT_FALSE(a[2].is_integer);
  EXPECT_TRUE(a[3].is_integer);
  EXPECT_EQ(a[3].integer, int64_t{-1000000000000000000});
  EXPECT_FALSE(a[4].is_integer);
  EXPECT_EQ(a[4].number, 1e19);
  EXPECT_FALSE(a[5].is_integer);
  EXPECT_EQ(a[5].number, 1e20);
  EXPECT_EQ(to_json_text(*r), "[100,100,100,-1000000000000000000,1e+19,1e+20]");
}

// A value may sit inside at most 64 arrays and objects.
TEST(StrictJson, NestingLimitIs64LevelsAroundAValue) {
  auto nested = [](int levels, const std::string& inner) {
    return std::string(static_cast<size_t>(levels), '[') + inner + std::string(static_cast<size_t>(levels), ']');
  };
  EXPECT_TRUE(parse_strict_json(nested(64, "1")).ok());
  EXPECT_TRUE(parse_strict_json(nested(65, "")).ok());
  std::string path = "$";
  for (int i = 0; i < 65; ++i) path = json_path_index(path, 0);
  for (const std::string& inner : {std::string("1"), std::string("[]"), std::string("{}")}) {
    Result<JsonValue> deep = parse_strict_json(nested(65, inner));
    ASSERT_FALSE(deep.ok()) << inner;
    EXPECT_EQ(deep.status().code(), ErrorCode::kFormatError);
    EXPECT_EQ(deep.status().message().rfind(path + ": nesting deeper than 64", 0), 0u) << deep.status().message();
  }
}

// nlohmann's own reader skips a byte order mark and stops at a NUL byte; the strict one refuses both.
TEST(StrictJson, RejectsAByteOrderMarkAndBytesAfterANul) {
  Result<JsonValue> bom = parse_strict_json("\xEF\xBB\xBF{}");
  ASSERT_FALSE(bom.ok());
  EXPECT_EQ(bom.status().message().rfind("$: ", 0), 0u) << bom.status().message();
  for (std::string_view text : {std::string_view("{\"v\": 1}\0{}", 11), std::string_view("1\0", 2)}) {
    Result<JsonValue> nul = parse_strict_json(text);
    ASSERT_FALSE(nul.ok()) << text;
    EXPECT_EQ(nul.status().message().rfind("$: unexpected content after the document", 0), 0u) << nul.status().message();
  }
  Result<JsonValue> in_string = parse_strict_json(std::string_view("[\"a\0\"]", 6));
  ASSERT_FALSE(in_string.ok());
  EXPECT_EQ(in_string.status().message().rfind("$[0]: ", 0), 0u) << in_string.status().message();
}

TEST(StrictJson, EqualityIgnoresKeyOrderButNotValues) {
  auto a = parse_strict_json(R"({"x": 1, "y": [1, 2]})");
  auto b = parse_strict_json(R"({"y": [1, 2], "x": 1.0})");
  auto c = parse_strict_json(R"({"y": [2, 1], "x": 1})");
  EXPECT_TRUE(json_equal(*a, *b));
  EXPECT_FALSE(json_equal(*a, *c));
}

}  // namespace
}  // namespace kiln::qualify
