// The inference request parsers on hostile bodies: each refusal is an ApiError naming the field.
#include "server/openai_request.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

Json chat_with(const Json& extra) {
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (const auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

TEST(OpenAiRequest, ResponseFormatWhoseTypeIsNotAStringIsRefusedNamingIt) {
  for (const char* rf : {R"({"type": 5})", R"({"type": null})", R"({"type": ["text"]})", R"({})", R"("text")"}) {
    ChatRequest out;
    std::optional<ApiError> e;
    ASSERT_NO_THROW(e = parse_chat_request(chat_with({{"response_format", Json::parse(rf)}}), out)) << rf;
    ASSERT_TRUE(e.has_value()) << rf;
    EXPECT_EQ(e->http_status, 400) << rf;
    EXPECT_EQ(e->param, "response_format") << rf;
  }
  ChatRequest out;
  EXPECT_FALSE(parse_chat_request(chat_with({{"response_format", {{"type", "text"}}}}), out).has_value());
}

// The body's nesting limit holds for JSON carried inside a string too: 200,000 levels of
// arguments used to be parsed whole and then walked recursively.
TEST(OpenAiRequest, ToolCallArgumentsStringNestedDeeperThan64IsRefusedNamingIt) {
  const std::string deep = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  Json call = {{"type", "function"}, {"function", {{"name", "f"}, {"arguments", deep}}}};
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}},
                                         {{"role", "assistant"}, {"tool_calls", Json::array({call})}}})}};
  ChatRequest out;
  const std::optional<ApiError> e = parse_chat_request(body, out);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 400);
  EXPECT_EQ(e->param, "messages");
  EXPECT_NE(e->message.find("messages[1].tool_calls[0].function.arguments nests deeper than 64 levels"),
            std::string::npos)
      << e->message;

  const std::string shallow = "{\"a\":" + std::string(60, '[') + std::string(60, ']') + "}";
  body["messages"][1]["tool_calls"][0]["function"]["arguments"] = shallow;
  EXPECT_FALSE(parse_chat_request(body, out).has_value());
}

TEST(OpenAiRequest, LogitBiasIsBoundedAndEachBadKeyNamed) {
  ChatRequest out;
  ASSERT_FALSE(parse_chat_request(chat_with({{"logit_bias", {{"15", 100}, {"7", -2.5}}}}), out).has_value());
  ASSERT_EQ(out.gen.logit_bias.size(), 2u);
  EXPECT_EQ(out.gen.logit_bias[0], (std::pair<int32_t, float>{15, 100.f}));
  EXPECT_EQ(out.gen.logit_bias[1], (std::pair<int32_t, float>{7, -2.5f}));
  const std::vector<std::pair<Json, std::string>> bad = {
      {Json{{"x1", 1}}, "logit_bias.x1"},          {Json{{"-3", 1}}, "logit_bias.-3"},
      {Json{{"3", 100.5}}, "logit_bias.3 must be"}, {Json{{"3", "up"}}, "logit_bias.3 must be"},
      {Json{{"99999999999", 1}}, "logit_bias.99999999999"}, {Json::array({1}), "at most 300"}};
  for (const auto& [lb, names] : bad) {
    ChatRequest o;
    const auto e = parse_chat_request(chat_with({{"logit_bias", lb}}), o);
    ASSERT_TRUE(e.has_value()) << lb.dump();
    EXPECT_EQ(e->param, "logit_bias");
    EXPECT_NE(e->message.find(names), std::string::npos) << e->message;
  }
  Json many = Json::object();
  for (int i = 0; i <= 300; ++i) many[std::to_string(i)] = 1;
  ChatRequest o;
  const auto e = parse_chat_request(chat_with({{"logit_bias", many}}), o);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("at most 300"), std::string::npos) << e->message;
}

TEST(OpenAiRequest, ResponseFormatAndExtensionsBecomeOneGrammar) {
  const Json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  ChatRequest out;
  ASSERT_FALSE(parse_chat_request(chat_with({{"response_format", {{"type", "json_schema"},
                                                                   {"json_schema", {{"name", "x"}, {"schema", schema}, {"strict", true}}}}}}),
                                  out).has_value());
  ASSERT_TRUE(out.gen.grammar.has_value());
  EXPECT_EQ(out.gen.grammar->kind, grammar::GrammarKind::kJsonSchema);
  EXPECT_EQ(Json::parse(out.gen.grammar->text), schema);
  EXPECT_EQ(out.gen.grammar_field, "response_format.json_schema.schema");

  ChatRequest j;
  ASSERT_FALSE(parse_chat_request(chat_with({{"response_format", {{"type", "json_object"}}}}), j).has_value());
  ASSERT_TRUE(j.gen.grammar.has_value());
  EXPECT_EQ(Json::parse(j.gen.grammar->text)["type"], "object");

  CompletionRequest c;
  ASSERT_FALSE(parse_completion_request({{"prompt", "x"}, {"regex", "[0-9]+"}}, false, c).has_value());
  ASSERT_TRUE(c.gen.grammar.has_value());
  EXPECT_EQ(c.gen.grammar->kind, grammar::GrammarKind::kRegex);
  EXPECT_EQ(c.gen.grammar_field, "regex");

  ChatRequest both;
  const auto e = parse_chat_request(chat_with({{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}), both);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "response_format");
  EXPECT_NE(e->message.find("cannot be combined with grammar"), std::string::npos) << e->message;

  ChatRequest unnamed;
  const auto u = parse_chat_request(chat_with({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", schema}}}}}}), unnamed);
  ASSERT_TRUE(u.has_value());
  EXPECT_NE(u->message.find("response_format.json_schema.name is required"), std::string::npos) << u->message;
}

TEST(OpenAiRequest, ToolChoiceForcingNeedsADeclaredFunction) {
  const Json tools = Json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
  ChatRequest named;
  ASSERT_FALSE(parse_chat_request(chat_with({{"tools", tools}, {"parallel_tool_calls", false},
                                             {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}),
                                  named).has_value());
  EXPECT_EQ(named.tool_choice_function, "get_weather");
  EXPECT_FALSE(named.parallel_tool_calls);
  ChatRequest required;
  ASSERT_FALSE(parse_chat_request(chat_with({{"tools", tools}, {"tool_choice", "required"}}), required).has_value());
  EXPECT_TRUE(required.tool_choice_required);
  EXPECT_TRUE(required.parallel_tool_calls);
  for (const Json& tc : {Json("always"), Json{{"type", "function"}}, Json{{"type", "function"}, {"function", {{"name", "other"}}}},
                         Json{{"type", "tool"}, {"function", {{"name", "get_weather"}}}}}) {
    ChatRequest o;
    const auto e = parse_chat_request(chat_with({{"tools", tools}, {"tool_choice", tc}}), o);
    ASSERT_TRUE(e.has_value()) << tc.dump();
    EXPECT_EQ(e->param, "tool_choice") << tc.dump();
  }
}

}  // namespace
}  // namespace kiln
