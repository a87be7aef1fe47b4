// Forced tool calls as grammars: every random text of the JSON syntax is a call of a declared
// function whose arguments validate (eval's JSON Schema check), the XML syntax admits the
// template's framing of typed parameters and refuses what its parser would misread, and one call
// is exactly one unless parallel calls are allowed.
#include <gtest/gtest.h>

#include <random>

#include "eval/json_schema_check.h"
#include "grammar/tool_call_grammar.h"
#include "grammar_test_util.h"

namespace kiln::grammar {
namespace {

using testing::compile_or_die;
using Json = nlohmann::ordered_json;

const Json kWeather = Json::parse(R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
  "required": ["city", "days"]})");
const Json kTime = Json::parse(R"({"type": "object", "properties": {"zone": {"type": "string", "maxLength": 6}}, "required": ["zone"]})");

bool complete(const std::shared_ptr<const Automaton>& a, std::string_view text) {
  Matcher m(a);
  return m.advance(text) && m.is_complete();
}

TEST(ToolCallGrammar, JsonSyntaxWritesOnlyDeclaredCallsWithValidArguments) {
  auto a = compile_or_die(tool_call_grammar(ToolCallSyntax::kJson, {{"get_weather", kWeather}, {"get_time", kTime}}, false));
  ASSERT_TRUE(a);
  std::mt19937_64 rng(11);
  std::set<std::string> names;
  for (int i = 0; i < 60; ++i) {
    auto text = testing::random_bytes(a, rng, 400, 0.5);
    ASSERT_TRUE(text) << "no complete call within 400 bytes";
    const std::string open = "<tool_call>\n", close = "\n</tool_call>";
    ASSERT_TRUE(text->starts_with(open) && text->ends_with(close)) << *text;
    const Json call = Json::parse(text->substr(open.size(), text->size() - open.size() - close.size()));
    ASSERT_TRUE(call.contains("name") && call.contains("arguments")) << *text;
    names.insert(call["name"].get<std::string>());
    const Json& schema = call["name"] == "get_weather" ? kWeather : kTime;
    ASSERT_EQ(call["name"] == "get_weather" || call["name"] == "get_time", true) << *text;
    EXPECT_EQ(json_schema_violation(nlohmann::json(schema), nlohmann::json(call["arguments"])).value_or(""), "") << *text;
  }
  EXPECT_EQ(names.size(), 2u);
  EXPECT_TRUE(complete(a, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"));
  EXPECT_FALSE(complete(a, "<tool_call>\n{\"name\": \"get_date\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"));
  EXPECT_FALSE(complete(a, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolCallGrammar, XmlSyntaxFramesTypedParameters) {
  auto a = compile_or_die(tool_call_grammar(ToolCallSyntax::kXml, {{"get_weather", kWeather}}, false));
  ASSERT_TRUE(a);
  const std::string head = "<tool_call>\n<function=get_weather>\n";
  const std::string tail = "</function>\n</tool_call>";
  auto param = [](const std::string& n, const std::string& v) { return "<parameter=" + n + ">\n" + v + "\n</parameter>\n"; };
  EXPECT_TRUE(complete(a, head + param("city", "Paris") + param("days", "3") + tail));
  EXPECT_TRUE(complete(a, head + param("city", "New York") + param("days", "7") + param("unit", "celsius") + tail));
  EXPECT_FALSE(complete(a, head + param("city", "Paris") + tail)) << "days is required";
  EXPECT_FALSE(complete(a, head + param("days", "3") + param("city", "Paris") + tail)) << "schema order";
  EXPECT_FALSE(complete(a, head + param("city", "Pa<ris") + param("days", "3") + tail)) << "'<' ends a value";
  EXPECT_FALSE(complete(a, head + param("city", "Paris") + param("days", "three") + tail));
  EXPECT_FALSE(complete(a, head + param("city", "Paris") + param("days", "9") + tail)) << "maximum 7";
  EXPECT_FALSE(complete(a, head + param("city", "Paris") + param("days", "3") + param("unit", "kelvin") + tail));
  EXPECT_FALSE(complete(a, head + param("city", "Paris and London") + param("days", "3") + tail)) << "maxLength 12";
}

TEST(ToolCallGrammar, ParallelCallsOnlyWhenAllowed) {
  const std::string one = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>";
  auto single = compile_or_die(tool_call_grammar(ToolCallSyntax::kJson, {{"get_time", kTime}}, false));
  auto many = compile_or_die(tool_call_grammar(ToolCallSyntax::kJson, {{"get_time", kTime}}, true));
  ASSERT_TRUE(single && many);
  EXPECT_TRUE(complete(single, one));
  EXPECT_FALSE(complete(single, one + "\n" + one));
  EXPECT_TRUE(complete(many, one + "\n" + one));
  Matcher m(single);
  ASSERT_TRUE(m.advance(one));
  EXPECT_FALSE(m.can_continue()) << "after one call only the end may come";
}

TEST(ToolCallGrammar, RefusalsNameTheFunctionAndPointer) {
  const Json patterned = Json::parse(R"({"type": "object", "properties": {"q": {"type": "string", "pattern": "^a+$"}}})");
  auto xml = tool_call_grammar(ToolCallSyntax::kXml, {{"search", patterned}}, false);
  ASSERT_FALSE(xml.ok());
  EXPECT_EQ(xml.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(xml.status().message().find("search: /properties/q/pattern"), std::string::npos) << xml.status().message();
  EXPECT_TRUE(tool_call_grammar(ToolCallSyntax::kJson, {{"search", patterned}}, false).ok()) << "JSON strings carry patterns";
  const Json multiple = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}})");
  auto json = tool_call_grammar(ToolCallSyntax::kJson, {{"count", multiple}}, false);
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.status().message().find("count: /properties/n/multipleOf"), std::string::npos) << json.status().message();
}

TEST(ToolCallGrammar, SpecTextRoundTrips) {
  const std::string text = tool_call_spec_text(ToolCallSyntax::kXml, {{"get_weather", kWeather}}, true);
  auto g = tool_call_grammar_of_spec(text, {});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto a = compile_or_die(std::move(g));
  const std::string call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                           "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(complete(a, call + "\n" + call));
}

}  // namespace
}  // namespace kiln::grammar
