#include "server/tool_call_parser.h"

#include <set>

#include <gtest/gtest.h>

#include "server/text_splits.h"

namespace kiln {
namespace {

ToolCallDelta run(const std::vector<std::string>& deltas, const nlohmann::ordered_json& tools = nullptr) {
  ToolCallParser p(tools);
  ToolCallDelta all;
  auto add = [&](ToolCallDelta d) {
    all.content += d.content;
    for (ToolCall& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  for (const std::string& d : deltas) add(p.feed(d));
  add(p.finish());
  return all;
}

ToolCallDelta run(const std::string& text, const nlohmann::ordered_json& tools = nullptr) {
  return run(std::vector<std::string>{text}, tools);
}

// Everything but the random ids.
void expect_same(const ToolCallDelta& a, const ToolCallDelta& b, const std::string& what) {
  EXPECT_EQ(a.content, b.content) << what;
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << what;
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].index, b.tool_calls[i].index) << what;
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name) << what;
    EXPECT_EQ(a.tool_calls[i].arguments_json, b.tool_calls[i].arguments_json) << what;
  }
}

const nlohmann::ordered_json kWeatherTools = nlohmann::ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "tags": {"type": "array"}, "opts": {"type": "object"}, "zip": {"type": "string"},
    "scale": {"type": ["number", "null"]}}}}}
])");

TEST(ToolCallParser, JsonFormat) {
  const ToolCallDelta r =
      run("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].index, 0);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"city":"Paris","days":2})");
}

TEST(ToolCallParser, JsonArgumentsKeepTheirOrderAndMayBeAString) {
  const ToolCallDelta r = run(R"(<tool_call>{"name": "f", "arguments": {"z": 1, "a": "é"}}</tool_call>)"
                              R"(<tool_call>{"name": "g", "arguments": "{\"b\": [1, 2]}"}</tool_call>)"
                              R"(<tool_call>{"name": "h"}</tool_call>)");
  ASSERT_EQ(r.tool_calls.size(), 3u);
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"z":1,"a":"é"})");
  EXPECT_EQ(r.tool_calls[1].arguments_json, R"({"b":[1,2]})");
  EXPECT_EQ(r.tool_calls[2].arguments_json, "{}");
}

TEST(ToolCallParser, XmlFormat) {
  const ToolCallDelta r = run(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"city":"Paris"})");
}

TEST(ToolCallParser, XmlValuesTakeTheTypeTheSchemaDeclares) {
  const std::string text =
      "<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\n42\n</parameter>\n"             // string: stays "42"
      "<parameter=days>\n3\n</parameter>\n"              // integer
      "<parameter=metric>\ntrue\n</parameter>\n"         // boolean
      "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"  // array
      "<parameter=opts>\n{\"x\": 1}\n</parameter>\n"      // object
      "<parameter=zip>\n\"01234\"\n</parameter>\n"        // string: the quotes are text
      "<parameter=scale>\nnull\n</parameter>\n"           // one of ["number", "null"]
      "</function>\n</tool_call>";
  const ToolCallDelta r = run(text, kWeatherTools);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments_json,
            R"({"city":"42","days":3,"metric":true,"tags":["a","b"],"opts":{"x":1},"zip":"\"01234\"","scale":null})");
}

TEST(ToolCallParser, XmlValueThatDoesNotParseAsTheDeclaredTypeStaysAString) {
  const ToolCallDelta r = run(
      "<tool_call><function=get_weather><parameter=days>a few</parameter><parameter=metric>1</parameter>"
      "</function></tool_call>",
      kWeatherTools);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"days":"a few","metric":"1"})");
}

TEST(ToolCallParser, XmlWithoutSchemaTriesJsonThenString) {
  const ToolCallDelta r = run(
      "<tool_call>\n<function=search>\n<parameter=q>\nParis\n</parameter>\n<parameter=limit>\n5\n</parameter>\n"
      "<parameter=exact>\nfalse\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"q":"Paris","limit":5,"exact":false})");
  // An unknown function in a tools list is still a call; its parameters are untyped.
  const ToolCallDelta u = run("<tool_call><function=other><parameter=n>7</parameter></function></tool_call>",
                              kWeatherTools);
  ASSERT_EQ(u.tool_calls.size(), 1u);
  EXPECT_EQ(u.tool_calls[0].arguments_json, R"({"n":7})");
}

TEST(ToolCallParser, XmlValueLosesOnlyOneFramingNewlineEachSide) {
  const ToolCallDelta r = run(
      "<tool_call>\n<function=write>\n<parameter=code>\n\ndef f():\n    pass\n\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"code":"\ndef f():\n    pass\n"})");
}

TEST(ToolCallParser, SeveralCallsInOrderWithUniqueIds) {
  const std::string call_a = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
  const std::string call_b = "<tool_call>\n<function=b>\n</function>\n</tool_call>";
  const ToolCallDelta r = run(call_a + "\n" + call_b + "\n" + call_a);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 3u);
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.tool_calls[i].index, i);
    EXPECT_EQ(r.tool_calls[i].id.rfind("call_", 0), 0u);
    EXPECT_EQ(r.tool_calls[i].id.size(), 29u);
    ids.insert(r.tool_calls[i].id);
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(r.tool_calls[0].name, "a");
  EXPECT_EQ(r.tool_calls[1].name, "b");
  EXPECT_EQ(r.tool_calls[1].arguments_json, "{}");
  EXPECT_EQ(r.tool_calls[2].name, "a");
}

TEST(ToolCallParser, TextAroundCallsIsTrimmedContent) {
  const ToolCallDelta r = run(
      "\nLet me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nDone. \n");
  EXPECT_EQ(r.content, "Let me check.\n\n\nDone.");
  EXPECT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(run("  plain text, no calls \n").content, "plain text, no calls");
}

TEST(ToolCallParser, MalformedSpansStayContent) {
  const std::vector<std::string> malformed = {
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\n</tool_call>",          // bad JSON
      "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>",                // no name
      "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",       // arguments not an object
      "<tool_call>\n<function=>\n</function>\n</tool_call>",                  // empty function name
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",  // unclosed parameter
      "<tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</tool_call>",    // no </function>
      "<tool_call>just words</tool_call>",
  };
  for (const std::string& text : malformed) {
    const ToolCallDelta r = run("Before " + text + " after");
    EXPECT_TRUE(r.tool_calls.empty()) << text;
    EXPECT_EQ(r.content, "Before " + text + " after");
  }
  // A good call after a malformed one still parses, with index 0.
  const ToolCallDelta r = run("<tool_call>oops</tool_call><tool_call>{\"name\": \"g\"}</tool_call>");
  EXPECT_EQ(r.content, "<tool_call>oops</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].index, 0);
}

TEST(ToolCallParser, SpanOpenAtTheEndIsACallOnlyIfItsBodyIsComplete) {
  const ToolCallDelta complete = run("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n");
  ASSERT_EQ(complete.tool_calls.size(), 1u);
  EXPECT_EQ(complete.content, "");
  const ToolCallDelta cut = run("Hi <tool_call>\n{\"name\": \"f\", \"argu");
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_EQ(cut.content, "Hi <tool_call>\n{\"name\": \"f\", \"argu");
}

TEST(ToolCallParser, StreamsTextAndWithholdsSpans) {
  ToolCallParser p;
  ToolCallDelta d = p.feed("Sure <tool");
  EXPECT_EQ(d.content, "Sure");  // " <tool" may begin a span (and the space may end the content)
  d = p.feed("_call>\n{\"name\": ");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.tool_calls.empty());
  d = p.feed("\"f\"}\n</tool_call");
  EXPECT_TRUE(d.tool_calls.empty());
  d = p.feed(">\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  d = p.feed("<tools are nice");
  EXPECT_EQ(d.content, " \n<tools are nice");
  d = p.finish();
  EXPECT_EQ(d.content, "");
}

TEST(ToolCallParser, EveryByteSplitGivesTheOneShotResult) {
  const std::vector<std::string> cases = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
      "Checking 東京.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n東京\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>{\"name\": \"x\"}</tool_call> ok",
      "text <tool_call>bad</tool_call> more <tool_call>{\"name\": \"y\", \"arguments\": {}}",
      "<tool_cal <tool_call> unclosed",
  };
  for (const std::string& text : cases) {
    const ToolCallDelta whole = run(text, kWeatherTools);
    expect_same(run(testing::bytes_of(text), kWeatherTools), whole, "bytes: " + text);
    expect_same(run(testing::code_points_of(text), kWeatherTools), whole, "code points: " + text);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      expect_same(run({text.substr(0, cut), text.substr(cut)}, kWeatherTools), whole,
                  "cut at " + std::to_string(cut) + ": " + text);
    }
  }
}

TEST(ToolCall, OpenAiShapes) {
  const ToolCall call{1, "call_abc", "get_weather", R"({"city":"Paris"})"};
  const nlohmann::json j = call.to_json();
  EXPECT_EQ(j, nlohmann::json::parse(
                   R"({"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})"));
  const nlohmann::json d = call.to_delta_json();
  EXPECT_EQ(d["index"], 1);
  EXPECT_EQ(d["function"]["arguments"], R"({"city":"Paris"})");
}

}  // namespace
}  // namespace kiln
