#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include "server/text_splits.h"

namespace kiln {
namespace {

ReasoningDelta run(ReasoningStart start, const std::vector<std::string>& deltas) {
  ReasoningParser p(start);
  ReasoningDelta all;
  for (const std::string& d : deltas) {
    ReasoningDelta r = p.feed(d);
    all.reasoning += r.reasoning;
    all.content += r.content;
  }
  ReasoningDelta r = p.finish();
  all.reasoning += r.reasoning;
  all.content += r.content;
  return all;
}

ReasoningDelta run(ReasoningStart start, const std::string& text) { return run(start, std::vector<std::string>{text}); }

TEST(PromptOpensReasoning, OnlyAnOpenThinkAtTheEnd) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>"));
  // Qwen3 with enable_thinking=false renders an empty, closed span.
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  // A "<think>" inside a user message does not open anything.
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>user\nwhat is <think>?<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning(""));
}

TEST(ReasoningParser, SplitsTheSpanAndTrimsNewlinesAroundTags) {
  const ReasoningDelta r = run(ReasoningStart::kOutside, "<think>\nabc\n</think>\n\nHello");
  EXPECT_EQ(r.reasoning, "abc");
  EXPECT_EQ(r.content, "Hello");
  // Whitespace before <think> and inside the reasoning is handled the same way; the content's
  // trailing whitespace is not next to a tag and stays.
  const ReasoningDelta s = run(ReasoningStart::kOutside, "\n <think> a\n\nb \t</think> Hi\n");
  EXPECT_EQ(s.reasoning, "a\n\nb");
  EXPECT_EQ(s.content, "Hi\n");
}

TEST(ReasoningParser, GenerationThatStartsInsideTheSpan) {
  const ReasoningDelta r = run(ReasoningStart::kInside, "abc\n</think>\n\nHello");
  EXPECT_EQ(r.reasoning, "abc");
  EXPECT_EQ(r.content, "Hello");
  // Inside, "<think>" is not recognised again: it is reasoning text.
  EXPECT_EQ(run(ReasoningStart::kInside, "x <think> y</think>z").reasoning, "x <think> y");
}

TEST(ReasoningParser, WithoutATagEverythingIsContentVerbatim) {
  const ReasoningDelta r = run(ReasoningStart::kOutside, "\nHello <think>not a span</think>\n");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "\nHello <think>not a span</think>\n");
  EXPECT_EQ(run(ReasoningStart::kOutside, "\n\n").content, "\n\n");
  EXPECT_EQ(run(ReasoningStart::kOutside, "<thin").content, "<thin");
  EXPECT_EQ(run(ReasoningStart::kOutside, "<b>bold</b>").content, "<b>bold</b>");
}

TEST(ReasoningParser, AnUnclosedSpanIsReasoning) {
  const ReasoningDelta r = run(ReasoningStart::kOutside, "<think>\nstill thinking\n\n");
  EXPECT_EQ(r.reasoning, "still thinking");
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(run(ReasoningStart::kInside, "abc </thi").reasoning, "abc </thi");
  EXPECT_EQ(run(ReasoningStart::kInside, "").reasoning, "");
}

TEST(ReasoningParser, OnlyTheFirstCloseTagEndsTheSpan) {
  const ReasoningDelta r = run(ReasoningStart::kOutside, "<think>a</think>b</think><think>c");
  EXPECT_EQ(r.reasoning, "a");
  EXPECT_EQ(r.content, "b</think><think>c");
  const ReasoningDelta empty = run(ReasoningStart::kOutside, "<think>\n\n</think>\n\nHello");
  EXPECT_EQ(empty.reasoning, "");
  EXPECT_EQ(empty.content, "Hello");
}

TEST(ReasoningParser, TagsSplitAcrossDeltasHoldBackOnlyTheirPrefix) {
  ReasoningParser p(ReasoningStart::kOutside);
  ReasoningDelta d = p.feed("<th");
  EXPECT_EQ(d.reasoning + d.content, "");
  d = p.feed("ink>\nab");
  EXPECT_EQ(d.reasoning, "ab");
  d = p.feed("c</th");
  EXPECT_EQ(d.reasoning, "c");  // "</th" waits
  d = p.feed("e");
  EXPECT_EQ(d.reasoning, "</the");  // it was not the tag after all
  d = p.feed("\n</think>");
  EXPECT_EQ(d.reasoning, "");
  d = p.feed("\n\nHi");
  EXPECT_EQ(d.content, "Hi");
  d = p.finish();
  EXPECT_TRUE(d.reasoning.empty() && d.content.empty());
}

TEST(ReasoningParser, ContentStreamsAsSoonAsNoTagCanFollow) {
  ReasoningParser p(ReasoningStart::kOutside);
  EXPECT_EQ(p.feed("\n").content, "");     // could still precede <think>
  EXPECT_EQ(p.feed("Hi").content, "\nHi");  // cannot any more
  EXPECT_EQ(p.feed(" <").content, " <");
}

TEST(ReasoningParser, ByteByByteEqualsOneShot) {
  const std::vector<std::pair<ReasoningStart, std::string>> cases = {
      {ReasoningStart::kOutside, "<think>\nabc\n</think>\n\nHello"},
      {ReasoningStart::kOutside, "  <think>思考 </think>\n答え\n"},
      {ReasoningStart::kOutside, "no span <think>"},
      {ReasoningStart::kOutside, "<think>unclosed </think"},
      {ReasoningStart::kInside, "\nreasoning\n\n</think>\n\n<tool_call>x</tool_call>"},
      {ReasoningStart::kInside, "a</think"},
  };
  for (const auto& [start, text] : cases) {
    const ReasoningDelta whole = run(start, text);
    for (const auto& deltas : {testing::bytes_of(text), testing::code_points_of(text)}) {
      const ReasoningDelta split = run(start, deltas);
      EXPECT_EQ(split.reasoning, whole.reasoning) << text;
      EXPECT_EQ(split.content, whole.content) << text;
    }
  }
}

}  // namespace
}  // namespace kiln
