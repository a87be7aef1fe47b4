#include "server/choice_output.h"

#include <gtest/gtest.h>

#include "server/text_splits.h"

namespace kiln {
namespace {

// The concatenation of a stream's deltas.
struct Collected {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool stopped = false;

  void add(const OutputDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    tool_calls.insert(tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  }
};

Collected stream(const ChoiceOutputOptions& options, const std::vector<std::string>& deltas) {
  ChoiceOutput out(options);
  Collected c;
  for (const std::string& d : deltas) c.add(out.feed(d));
  c.add(out.finish());
  c.stopped = out.stopped();
  // Streaming and the accumulated (non-streaming) result agree exactly, ids included.
  EXPECT_EQ(c.reasoning, out.reasoning());
  EXPECT_EQ(c.content, out.content());
  EXPECT_EQ(c.tool_calls.size(), out.tool_calls().size());
  for (size_t i = 0; i < c.tool_calls.size() && i < out.tool_calls().size(); ++i) {
    EXPECT_EQ(c.tool_calls[i].id, out.tool_calls()[i].id);
    EXPECT_EQ(c.tool_calls[i].to_json(), out.tool_calls()[i].to_json());
  }
  return c;
}

ChoiceOutputOptions tools_options() {
  ChoiceOutputOptions o;
  o.parse_tool_calls = true;
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  return o;
}

TEST(ChoiceOutput, ReasoningThenToolCallWithNullContent) {
  ChoiceOutputOptions o = tools_options();
  o.starts_in_reasoning = true;
  const Collected c = stream(o, {"The user wants weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
                                 "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
                                 "</function>\n</tool_call>"});
  EXPECT_EQ(c.reasoning, "The user wants weather.");
  EXPECT_EQ(c.content, "");  // rendered as null content beside tool_calls
  ASSERT_EQ(c.tool_calls.size(), 1u);
  EXPECT_EQ(c.tool_calls[0].name, "get_weather");
  EXPECT_EQ(c.tool_calls[0].arguments_json, R"({"city":"Paris","days":2})");
}

TEST(ChoiceOutput, StopStringEndsTheOutputAndIsNotIncluded) {
  ChoiceOutputOptions o;
  o.stop = {"END"};
  ChoiceOutput out(o);
  OutputDelta d = out.feed("<think>\nhmm\n</think>\n\nAnswer: 4 E");
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "Answer: 4 ");
  EXPECT_FALSE(out.stopped());
  d = out.feed("ND and more");
  EXPECT_TRUE(out.stopped());
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(out.feed("ignored").empty());
  EXPECT_TRUE(out.finish().empty());
  EXPECT_EQ(out.content(), "Answer: 4 ");
}

TEST(ChoiceOutput, StopInsideReasoningEndsItAsReasoning) {
  ChoiceOutputOptions o;
  o.stop = {"\n\n\n"};
  o.starts_in_reasoning = true;
  const Collected c = stream(o, testing::code_points_of("step one\n\n\nstep two</think>answer"));
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.reasoning, "step one");
  EXPECT_EQ(c.content, "");
}

TEST(ChoiceOutput, ParsersCanBeTurnedOff) {
  ChoiceOutputOptions o;
  o.parse_reasoning = false;
  const std::string text = "<think>x</think>\n<tool_call>{\"name\": \"f\"}</tool_call>\n";
  const Collected c = stream(o, {text});
  EXPECT_EQ(c.reasoning, "");
  EXPECT_EQ(c.content, text);  // verbatim: neither parser ran
  EXPECT_TRUE(c.tool_calls.empty());
}

TEST(ChoiceOutput, ToolCallInsideReasoningIsReasoning) {
  ChoiceOutputOptions o = tools_options();
  const Collected c = stream(o, {"<think>maybe <tool_call>{\"name\": \"f\"}</tool_call></think>No call."});
  EXPECT_EQ(c.reasoning, "maybe <tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(c.content, "No call.");
  EXPECT_TRUE(c.tool_calls.empty());
}

TEST(ChoiceOutput, EmptyDeltaIsEmpty) {
  EXPECT_TRUE(OutputDelta{}.empty());
  OutputDelta d;
  d.tool_calls.push_back(ToolCall{});
  EXPECT_FALSE(d.empty());
}

TEST(ChoiceOutput, RandomDeltaSplitsConcatenateToTheOneShotResult) {
  struct Case {
    ChoiceOutputOptions options;
    std::string text;
  };
  std::vector<Case> cases;
  cases.push_back({ChoiceOutputOptions{}, "<think>\nLet me think about 東京.\n</think>\n\nIt is sunny. ☀️\n"});
  {
    ChoiceOutputOptions o = tools_options();
    o.starts_in_reasoning = true;
    o.stop = {"<|im_end|>", "Observation:"};
    cases.push_back({o, "Need weather\n\n</think>\n\nSure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                        "Paris\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
                        "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\nObservation: cut here"});
  }
  {
    ChoiceOutputOptions o = tools_options();
    cases.push_back({o, "No reasoning here. <tool_call>broken</tool_call> and <tool_cal text\n"});
  }
  {
    ChoiceOutputOptions o;
    o.stop = {"abab", "。"};
    o.starts_in_reasoning = true;
    cases.push_back({o, "still <think>reasoning aba</think>\n\ncontent ababab"});
  }
  {
    ChoiceOutputOptions o;
    o.stop = {"</think>"};  // a stop string may cut a tag
    cases.push_back({o, "<think>a</think>b"});
  }
  for (const Case& c : cases) {
    const Collected whole = stream(c.options, {c.text});
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      const Collected split = stream(c.options, testing::random_split(c.text, seed));
      EXPECT_EQ(split.reasoning, whole.reasoning) << c.text << " seed " << seed;
      EXPECT_EQ(split.content, whole.content) << c.text << " seed " << seed;
      EXPECT_EQ(split.stopped, whole.stopped) << c.text << " seed " << seed;
      ASSERT_EQ(split.tool_calls.size(), whole.tool_calls.size()) << c.text << " seed " << seed;
      for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
        EXPECT_EQ(split.tool_calls[i].index, whole.tool_calls[i].index);
        EXPECT_EQ(split.tool_calls[i].name, whole.tool_calls[i].name);
        EXPECT_EQ(split.tool_calls[i].arguments_json, whole.tool_calls[i].arguments_json);
      }
    }
  }
  // The expected one-shot results, so that agreement is not agreement on something wrong.
  const Collected second = stream(cases[1].options, {cases[1].text});
  EXPECT_EQ(second.reasoning, "Need weather");
  EXPECT_EQ(second.content, "Sure.");
  ASSERT_EQ(second.tool_calls.size(), 2u);
  EXPECT_EQ(second.tool_calls[0].arguments_json, R"({"city":"Paris"})");
  EXPECT_EQ(second.tool_calls[1].arguments_json, R"({"city":"Rome"})");
  EXPECT_TRUE(second.stopped);
  const Collected fourth = stream(cases[3].options, {cases[3].text});
  EXPECT_EQ(fourth.reasoning, "still <think>reasoning aba");
  EXPECT_EQ(fourth.content, "content ");
  const Collected fifth = stream(cases[4].options, {cases[4].text});
  EXPECT_EQ(fifth.reasoning, "a");
  EXPECT_EQ(fifth.content, "");
}

}  // namespace
}  // namespace kiln
