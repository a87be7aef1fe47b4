// JSON Schema's formats as assertions, over strings written by hand from each format's RFC (3339
// for dates, times and durations, 4122 for UUIDs, 2673 and 4291 for addresses, 1123 for host
// names, 5321 for mailboxes, 3986 for URIs), and the check's format option: off, format is an
// annotation; on, it asserts, naming the value's pointer.
#include <gtest/gtest.h>

#include "eval/json_format.h"
#include "eval/json_schema_check.h"

namespace kiln {
namespace {

struct FormatCase {
  const char* format;
  std::vector<std::string> valid, invalid;
};

TEST(JsonFormat, EachFormatHoldsForItsFormAndNotForNearMisses) {
  const FormatCase cases[] = {
      {"date", {"2024-02-29", "1999-12-31"}, {"2024-13-01", "2024-00-10", "2024-1-01", "2024-01-32", "2024/01/01", "2024-01-01x"}},
      {"time", {"23:59:59Z", "08:30:00.25+05:30", "00:00:00-12:00"}, {"24:00:00Z", "12:60:00Z", "12:00:00", "12:00:00.Z", "12:00:00+5:30"}},
      {"date-time", {"2024-02-29T08:30:00Z", "2024-02-29T08:30:00.5-01:00"}, {"2024-02-29 08:30:00Z", "2024-02-29T08:30:00", "2024-02-29"}},
      {"duration", {"P3Y6M4DT12H30M5S", "P2W", "PT1M", "P1D"}, {"P", "PT", "P1H", "P1D2Y", "P1DT", "PW", "3D"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-00000000ABCD"},
       {"123e4567e89b-12d3-a456-426614174000-", "123e4567-e89b-12d3-a456-42661417400g", "123e4567-e89b-12d3-a456-42661417400"}},
      {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3", "a.b.c.d"}},
      {"ipv6", {"::1", "2001:db8::ff00:42:8329", "fe80::"}, {"::ffff:1.2.3.4", "1:2:3:4:5:6:7:8:9", "12345::", "g::1", ""}},
      {"hostname", {"example.com", "a-b.c", "localhost", std::string(63, 'a') + ".com"},
       {"-a.com", "a-.com", "a..b", "", "a_b.com", std::string(64, 'a') + ".com"}},
      {"email", {"joe.bloggs+x@example.com", "a@b.co"}, {"joe@localhost", ".joe@example.com", "joe.@example.com", "a..b@example.com", "a@@b.com", "@example.com"}},
      {"uri", {"https://example.com/a%20b?q=1", "urn:isbn:0451450523", "mailto:a@b.co"},
       {"example.com", "http://a b", "http://x/%zz", "1http:x", "http:", "http://x/{y}"}},
  };
  for (const FormatCase& c : cases) {
    EXPECT_TRUE(is_json_format(c.format)) << c.format;
    for (const std::string& s : c.valid) EXPECT_TRUE(json_format_holds(c.format, s)) << c.format << ": " << s;
    for (const std::string& s : c.invalid) EXPECT_FALSE(json_format_holds(c.format, s)) << c.format << ": " << s;
  }
  EXPECT_FALSE(is_json_format("int32"));
  EXPECT_FALSE(json_format_holds("int32", "1"));
}

TEST(JsonFormat, TheSchemaCheckAssertsFormatsOnlyWhenAsked) {
  const nlohmann::json schema = nlohmann::json::parse(R"({"type": "object", "properties": {
      "day": {"type": "string", "format": "date"}, "n": {"type": "string", "format": "int32"}}})");
  const nlohmann::json good = {{"day", "2024-02-29"}}, bad = {{"day", "2024-02-30x"}}, unknown = {{"n", "7"}};
  EXPECT_EQ(json_schema_violation(schema, bad), std::nullopt) << "format is an annotation by default";
  EXPECT_EQ(json_schema_violation(schema, unknown), std::nullopt);
  JsonSchemaCheckOptions asserting;
  asserting.assert_format = true;
  EXPECT_EQ(json_schema_violation(schema, good, asserting), std::nullopt);
  EXPECT_EQ(json_schema_violation(schema, bad, asserting).value_or(""), "/day: not a date: \"2024-02-30x\"");
  EXPECT_EQ(json_schema_violation(schema, unknown, asserting).value_or(""), "/n: format \"int32\" is not one this check knows");
}

}  // namespace
}  // namespace kiln
