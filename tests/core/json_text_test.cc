#include "core/json_text.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

std::string nested(int levels, char open, char close) { return std::string(levels, open) + std::string(levels, close); }

TEST(JsonText, SixtyFourLevelsParseAndTheSixtyFifthIsRefusedWithItsByte) {
  EXPECT_TRUE(parse_json(nested(64, '[', ']'), "body").ok());
  auto deep = parse_json(nested(65, '[', ']'), "the body");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(deep.status().message(), "the body nests deeper than 64 levels (byte 64)");
  // Objects count as levels too, mixed with arrays.
  std::string mixed;
  for (int i = 0; i < 40; ++i) mixed += "{\"a\":[";
  mixed += "1";
  for (int i = 0; i < 40; ++i) mixed += "]}";
  EXPECT_FALSE(parse_ordered_json(mixed, "x").ok());
}

TEST(JsonText, BracketsInsideStringsAndEscapedQuotesDoNotCount) {
  const std::string s = "{\"k\": \"" + std::string(500, '[') + "\\\"" + std::string(500, '{') + "\"}";
  auto j = parse_json(s, "body");
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ((*j)["k"].get<std::string>().size(), 1001u);
  EXPECT_TRUE(check_json_depth("[\"\\\\\", [[]]]", 3).ok());  // an escaped backslash ends before the quote
  EXPECT_FALSE(check_json_depth("[\"\\\\\", [[[]]]]", 3).ok());
}

TEST(JsonText, AFourHundredKilobyteNestingIsRefusedNotRecursedInto) {
  const std::string deep = nested(200000, '[', ']');
  auto j = parse_ordered_json(deep, "the request body");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("byte 64"), std::string::npos) << j.status().message();
}

TEST(JsonText, SyntaxErrorsNameWhatAndWhere) {
  auto j = parse_json("{\"a\": 1,}", "dataset line 3");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message().rfind("dataset line 3 is not valid JSON: ", 0), 0u) << j.status().message();
  EXPECT_NE(j.status().message().find("column 9"), std::string::npos) << j.status().message();
  EXPECT_FALSE(parse_json("", "empty").ok());
  EXPECT_FALSE(parse_json("{\"a\": \"\xff\"}", "bad utf-8").ok());
}

}  // namespace
}  // namespace kiln
