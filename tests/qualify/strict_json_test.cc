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
                      Rejection{R"({"v": "a\qb"})", "$.v: invalid escape"},
                      Rejection{"{\"v\": \"a\tb\"}", "$.v: unescaped control character"},
                      Rejection{R"({"v": "\ud800"})", "$.v: unpaired surrogate"},
                      Rejection{"{\"v\": \"\xC0\x80\"}", "$.v: invalid UTF-8"},
                      Rejection{R"({"v": 1} {})", "$: unexpected content after the document"},
                      Rejection{R"({"v": tru})", "$.v: unexpected character 't'"},
                      Rejection{R"({"a b": {"c": x}})", "$[\"a b\"].c: unexpected character"},
                      Rejection{"", "$: unexpected end of input"}));

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

TEST(StrictJson, EqualityIgnoresKeyOrderButNotValues) {
  auto a = parse_strict_json(R"({"x": 1, "y": [1, 2]})");
  auto b = parse_strict_json(R"({"y": [1, 2], "x": 1.0})");
  auto c = parse_strict_json(R"({"y": [2, 1], "x": 1})");
  EXPECT_TRUE(json_equal(*a, *b));
  EXPECT_FALSE(json_equal(*a, *c));
}

}  // namespace
}  // namespace kiln::qualify
