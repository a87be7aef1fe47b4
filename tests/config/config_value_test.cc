// Text of environment variables and flags into typed values, and values back into TOML spelling.
#include <gtest/gtest.h>

#include "config/config_value.h"

namespace kiln {
namespace {

TEST(ConfigValue, IntegersMustBeTheWholeText) {
  EXPECT_EQ(std::get<int64_t>(parse_config_value(FieldType::kInteger, "8420").value()), 8420);
  EXPECT_EQ(std::get<int64_t>(parse_config_value(FieldType::kInteger, "-3").value()), -3);
  for (const char* bad : {"80x80", "", " 1", "1 ", "+1", "1.5", "0x10"}) {
    auto r = parse_config_value(FieldType::kInteger, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), "'" + std::string(bad) + "' is not an integer");
  }
  EXPECT_EQ(parse_config_value(FieldType::kInteger, "99999999999999999999").status().message(),
            "'99999999999999999999' does not fit a 64-bit integer");
}

TEST(ConfigValue, BoolsAreExactlyTrueFalseOneOrZero) {
  EXPECT_TRUE(std::get<bool>(parse_config_value(FieldType::kBool, "true").value()));
  EXPECT_TRUE(std::get<bool>(parse_config_value(FieldType::kBool, "1").value()));
  EXPECT_FALSE(std::get<bool>(parse_config_value(FieldType::kBool, "false").value()));
  EXPECT_FALSE(std::get<bool>(parse_config_value(FieldType::kBool, "0").value()));
  for (const char* bad : {"yes", "no", "True", "on", ""}) {
    auto r = parse_config_value(FieldType::kBool, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), "'" + std::string(bad) + "' is not a bool (true, false, 1 or 0)");
  }
}

TEST(ConfigValue, FloatsMustBeFiniteNumbers) {
  EXPECT_DOUBLE_EQ(std::get<double>(parse_config_value(FieldType::kFloat, "0.5").value()), 0.5);
  EXPECT_DOUBLE_EQ(std::get<double>(parse_config_value(FieldType::kFloat, "1").value()), 1.0);
  for (const char* bad : {"nan", "inf", "0.5x", "", "half"})
    EXPECT_EQ(parse_config_value(FieldType::kFloat, bad).status().message(),
              "'" + std::string(bad) + "' is not a finite number");
}

TEST(ConfigValue, StringsAndEnumsTakeTheTextAsIs) {
  EXPECT_EQ(std::get<std::string>(parse_config_value(FieldType::kString, " a b ").value()), " a b ");
  EXPECT_EQ(std::get<std::string>(parse_config_value(FieldType::kEnum, "cuda").value()), "cuda");
}

TEST(ConfigValue, FormatsAsTomlSpellsIt) {
  EXPECT_EQ(format_config_value(int64_t{8420}), "8420");
  EXPECT_EQ(format_config_value(0.9), "0.9");
  EXPECT_EQ(format_config_value(1.0), "1.0");
  EXPECT_EQ(format_config_value(true), "true");
  EXPECT_EQ(format_config_value(std::string("127.0.0.1")), "\"127.0.0.1\"");
  EXPECT_EQ(format_config_value(std::string("a\"b\\c\n")), "\"a\\\"b\\\\c\\u000a\"");
}

}  // namespace
}  // namespace kiln
