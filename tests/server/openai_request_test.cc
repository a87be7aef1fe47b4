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

}  // namespace
}  // namespace kiln
