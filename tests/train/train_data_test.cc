// Training data from the API's JSON with the real Qwen3 tokenizer and chat template (fetched by
// scripts/fetch-tokenizer, as the tokenizer and server tests use it; scripts/test runs it before
// ctest): the target spans decode to exactly each assistant answer and its <|im_end|>, the context
// tokens are the encoding of the hand-written Qwen3 rendering of the prompt, GRPO completions and
// trajectory segments get their roles, and every invalid input is refused naming its field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "test_util.h"
#include "tokenizer/qwen3_fixture.h"
#include "train/train_data.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;
using R = TokenRole;

struct Qwen3Data {
  const Tokenizer* tok = nullptr;
  std::optional<ChatTemplate> tmpl;
  TrainDataContext ctx() const {
    TrainDataContext c;
    c.tokenizer = tok;
    c.chat_template = &*tmpl;
    return c;
  }
};

const Qwen3Data* qwen3_data() {
  static Qwen3Data* d = [] {
    auto* q = new Qwen3Data;
    q->tok = testing::qwen3();
    auto t = ChatTemplate::load(testing::qwen3_dir());
    if (t.ok()) q->tmpl = std::move(*t);
    return q;
  }();
  if (!d->tok || !d->tmpl) {
    ADD_FAILURE() << "the Qwen3 tokenizer or chat template is missing at " << testing::qwen3_dir()
                  << "; run scripts/fetch-tokenizer";
    return nullptr;
  }
  return d;
}

std::string decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<TokenId> t(ids.begin(), ids.end());
  return tok.decode(t).value();
}

// The text of each maximal run of tokens with `role`.
std::vector<std::string> runs(const Tokenizer& tok, const TrainSequence& s, TokenRole role) {
  std::vector<std::string> out;
  std::vector<int32_t> cur;
  for (size_t i = 0; i <= s.tokens.size(); ++i) {
    if (i < s.tokens.size() && s.roles[i] == role) {
      cur.push_back(s.tokens[i]);
    } else if (!cur.empty()) {
      out.push_back(decode(tok, cur));
      cur.clear();
    }
  }
  return out;
}

std::vector<int32_t> encode(const Tokenizer& tok, const std::string& text) {
  auto ids = tok.encode(text);
  return {ids.begin(), ids.end()};
}

Json msg(const char* role, const char* content) { return Json{{"role", role}, {"content", content}}; }

TEST(TrainData, SingleTurnTargetsTheAnswerAndItsEndOfTurn) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  const Json ex = {{"messages", {msg("system", "You are terse."), msg("user", "Hello"), msg("assistant", "Hi there!")}}};
  auto s = sft_sequence(ex, "examples[0]", q->ctx());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  // Qwen3's template writes the last assistant turn after an empty think block, which is what its
  // generation prompt with enable_thinking=false holds: the prompt is context, the answer target.
  const std::string prompt =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
      "<think>\n\n</think>\n\n";
  const std::vector<int32_t> prompt_ids = encode(*q->tok, prompt);
  ASSERT_GT(s->tokens.size(), prompt_ids.size());
  EXPECT_EQ(std::vector<int32_t>(s->tokens.begin(), s->tokens.begin() + prompt_ids.size()), prompt_ids);
  for (size_t i = 0; i < prompt_ids.size(); ++i) EXPECT_EQ(s->roles[i], R::kContext) << i;
  EXPECT_EQ(runs(*q->tok, *s, R::kTarget), std::vector<std::string>{"Hi there!<|im_end|>"});
  // Nothing after the last target (the template's trailing newline predicts nothing).
  EXPECT_EQ(s->roles.back(), R::kTarget);
  EXPECT_EQ(s->tokens.back(), *q->tok->token_to_id("<|im_end|>"));
}

// max_seq_length keeps a sequence's first tokens: the prompt and the start of the answer stay, the
// rest goes; an example left without a target token is refused, naming it and its first target.
TEST(TrainData, MaxSeqLengthKeepsTheFirstTokensAndRefusesAnExampleLeftWithoutTargets) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  const Json ex = {{"messages", {msg("user", "Hello"), msg("assistant", "one two three four five six seven")}}};
  const TrainSequence whole = sft_sequence(ex, "examples[0]", q->ctx()).value();
  const auto first = std::find(whole.roles.begin(), whole.roles.end(), R::kTarget) - whole.roles.begin();
  ASSERT_GT(whole.tokens.size(), static_cast<size_t>(first + 3));
  TrainDataContext c = q->ctx();
  c.max_seq_length = first + 2;  // the prompt and two answer tokens
  const TrainSequence cut = sft_sequence(ex, "examples[0]", c).value();
  EXPECT_EQ(cut.tokens, std::vector<int32_t>(whole.tokens.begin(), whole.tokens.begin() + first + 2));
  EXPECT_EQ(cut.roles, std::vector<R>(whole.roles.begin(), whole.roles.begin() + first + 2));
  c.max_seq_length = static_cast<int64_t>(whole.tokens.size());  // fits: unchanged
  EXPECT_EQ(sft_sequence(ex, "examples[0]", c).value().tokens, whole.tokens);
  c.max_seq_length = first;  // every target cut
  auto none = sft_sequence(ex, "examples[3]", c);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message().rfind("examples[3]: its first target token is token " + std::to_string(first), 0), 0u)
      << none.status().to_string();
  // A GRPO completion the same way, named by its path: a limit of the prompt's length cuts it all.
  const Json group = {{"messages", {msg("user", "Hello")}},
                      {"completions", {{{"text", "one two three"}, {"reward", 1}}, {{"text", "four"}, {"reward", 0}}}}};
  const GrpoGroup full = grpo_group(group, "groups[1]", q->ctx()).value();
  const auto& roles = full.completions[0].sequence.roles;
  c.max_seq_length = std::find(roles.begin(), roles.end(), R::kTarget) - roles.begin();
  auto g = grpo_group(group, "groups[1]", c);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message().rfind("groups[1].completions[0]: its first target token", 0), 0u) << g.status().to_string();
}

TEST(TrainData, MultiTurnTargetsEveryAssistantTurn) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  const Json ex = {{"messages", {msg("user", "2+2?"), msg("assistant", "4"), msg("user", "and 3+3?"), msg("assistant", "6")}}};
  auto s = sft_sequence(ex, "examples[0]", q->ctx());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  // An earlier turn renders without the think block (Qwen3 keeps it only after the last query).
  EXPECT_EQ(runs(*q->tok, *s, R::kTarget), (std::vector<std::string>{"4<|im_end|>", "6<|im_end|>"}));
  EXPECT_EQ(runs(*q->tok, *s, R::kContext),
            (std::vector<std::string>{"<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
                                      "\n<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"}));
  const std::string whole =
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nand 3+3?<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\n6<|im_end|>";
  EXPECT_EQ(decode(*q->tok, s->tokens), whole);
}

TEST(TrainData, ExamplesAndJsonlGiveTheSameSequences) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  const Json examples = Json::array({{{"messages", {msg("user", "a"), msg("assistant", "b")}}},
                                     {{"messages", {msg("user", "c"), msg("assistant", "d")}}}});
  auto a = sft_sequences(examples, q->ctx());
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const std::string dir = testing::temp_dir("train-data");
  const std::string path = dir + "/data.jsonl";
  {
    std::ofstream f(path);
    f << examples[0].dump() << "\n\n" << examples[1].dump() << "\n";
  }
  auto b = sft_sequences_from_jsonl(path, q->ctx());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(a->size(), 2u);
  ASSERT_EQ(b->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*a)[i].tokens, (*b)[i].tokens);
    EXPECT_EQ((*a)[i].roles, (*b)[i].roles);
  }
  {
    std::ofstream f(path);
    f << examples[0].dump() << "\n{not json\n";
  }
  auto bad = sft_sequences_from_jsonl(path, q->ctx());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("data.jsonl:2 is not valid JSON: "), std::string::npos) << bad.status().message();
  {
    std::ofstream f(path);
    f << examples[0].dump() << "\n" << R"({"messages": [{"role": "user", "content": "x"}]})" << "\n";
  }
  bad = sft_sequences_from_jsonl(path, q->ctx());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("data.jsonl:2.messages: has no assistant turn"), std::string::npos)
      << bad.status().message();
  std::filesystem::remove_all(dir);
}

TEST(TrainData, SftErrorsNameTheField) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  struct Bad {
    Json examples;
    int64_t max_tokens;
    std::string expect;
  };
  const Json ok = {{"messages", {msg("user", "hi"), msg("assistant", "hello")}}};
  const std::vector<Bad> table = {
      {Json::array(), 0, "examples: must be a non-empty array"},
      {Json::object(), 0, "examples: must be a non-empty array"},
      {Json::array({ok, {{"messages", {msg("user", "hi")}}}}), 0, "examples[1].messages: has no assistant turn"},
      {Json::array({{{"messages", {msg("user", "hi"), {{"role", "assistant"}, {"content", 5}}}}}}), 0,
       "examples[0].messages[1].content: must be a string"},
      {Json::array({{{"messages", {msg("user", "hi"), {{"role", "assistant"}, {"content", Json::array()}}}}}}), 0,
       "examples[0].messages[1].content: must be a string"},
      {Json::array({{{"messages", {{{"content", "hi"}}}}}}), 0, "examples[0].messages[0].role: must be a string"},
      {Json::array({{{"messages", Json::array()}}}), 0, "examples[0].messages: must be a non-empty array"},
      {Json::array({{{"prompt", "x"}}}), 0, "examples[0].prompt: unknown field"},
      {Json::array({"text"}), 0, "examples[0]: must be an object"},
      {Json::array({ok, ok}), 5, "examples[0]: "},  // longer than the limit: the first example already is
  };
  for (const Bad& b : table) {
    TrainDataContext ctx = q->ctx();
    ctx.max_tokens = b.max_tokens;
    auto r = sft_sequences(b.examples, ctx);
    ASSERT_FALSE(r.ok()) << b.expect;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.expect), std::string::npos) << r.status().message();
    if (b.max_tokens) {
      EXPECT_NE(r.status().message().find("longer than the context limit of 5"), std::string::npos);
    }
  }
}

TEST(TrainData, TemplateThatBreaksThePrefixPropertyIsRefused) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  // The generation prompt says "Assistant: " but an assistant turn renders as "A: ".
  const std::string src =
      "{% for m in messages %}{% if m.role == 'assistant' %}A: {{ m.content }}<|im_end|>\n"
      "{% else %}U: {{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}Assistant: {% endif %}";
  auto broken = ChatTemplate::from_source(src);
  ASSERT_TRUE(broken.ok()) << broken.status().to_string();
  TrainDataContext ctx = q->ctx();
  ctx.chat_template = &*broken;
  const Json ex = {{"messages", {msg("user", "hi"), msg("assistant", "hello")}}};
  auto r = sft_sequence(ex, "examples[0]", ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("examples[0].messages[1]: the chat template breaks the prefix property"),
            std::string::npos)
      << r.status().message();
  // The same template with a consistent generation prompt works: the spans are found generically.
  std::string fixed = src;
  fixed.replace(fixed.find("Assistant: "), 11, "A: ");
  auto good = ChatTemplate::from_source(fixed);
  ASSERT_TRUE(good.ok());
  ctx.chat_template = &*good;
  auto s = sft_sequence(ex, "examples[0]", ctx);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(runs(*q->tok, *s, R::kTarget), std::vector<std::string>{"hello<|im_end|>"});
  EXPECT_EQ(runs(*q->tok, *s, R::kContext), std::vector<std::string>{"U: hi<|im_end|>\nA: "});
}

TEST(TrainData, GrpoCompletionsAndTrajectories) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  const Json group = {
      {"messages", {msg("user", "Pick")}},
      {"completions",
       {{{"text", "yes"}, {"reward", 1}},
        {{"trajectory",
          {{{"type", "action"}, {"text", "<tool_call>look</tool_call>"}},
           {{"type", "observation"}, {"text", "<|im_end|>\n<|im_start|>user\n<tool_response>dark</tool_response>"}},
           {{"type", "action"}, {"text", "no"}}}},
         {"reward", -0.5}}}}};
  auto g = grpo_groups(Json::array({group}), q->ctx());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->size(), 1u);
  const GrpoGroup& gr = (*g)[0];
  ASSERT_EQ(gr.completions.size(), 2u);
  EXPECT_EQ(gr.completions[0].reward, 1.0);
  EXPECT_EQ(gr.completions[1].reward, -0.5);
  EXPECT_TRUE(gr.completions[0].behavior_logp.empty());
  // The prompt: the messages with the default generation prompt, as a chat request renders them.
  const std::vector<int32_t> prompt = encode(*q->tok, "<|im_start|>user\nPick<|im_end|>\n<|im_start|>assistant\n");
  for (const auto& c : gr.completions)
    EXPECT_EQ(std::vector<int32_t>(c.sequence.tokens.begin(), c.sequence.tokens.begin() + prompt.size()), prompt);
  EXPECT_EQ(runs(*q->tok, gr.completions[0].sequence, R::kTarget), std::vector<std::string>{"yes<|im_end|>"});
  EXPECT_EQ(runs(*q->tok, gr.completions[1].sequence, R::kTarget),
            (std::vector<std::string>{"<tool_call>look</tool_call>", "no<|im_end|>"}));
  EXPECT_EQ(runs(*q->tok, gr.completions[1].sequence, R::kObservation),
            std::vector<std::string>{"<|im_end|>\n<|im_start|>user\n<tool_response>dark</tool_response>"});
}

TEST(TrainData, GrpoErrorsNameTheField) {
  const Qwen3Data* q = qwen3_data();
  if (!q) return;
  // Json::array, not braces: clang reads `Json m = {object}` as a copy of the object.
  const Json m = Json::array({msg("user", "Pick")});
  const Json yes = {{"text", "yes"}, {"reward", 1}};
  Json nan_reward = {{"text", "no"}, {"reward", 0}};
  nan_reward["reward"] = std::nan("");
  const std::vector<std::pair<Json, std::string>> table = {
      {Json::array(), "groups: must be a non-empty array"},
      {Json::array({{{"messages", m}, {"completions", {yes}}}}), "groups[0].completions: must be an array of at least 2"},
      {Json::array({{{"messages", m}, {"completions", {yes, nan_reward}}}}), "groups[0].completions[1].reward: must be finite"},
      {Json::array({{{"messages", m}, {"completions", {yes, {{"text", "x"}, {"reward", "high"}}}}}}),
       "groups[0].completions[1].reward: must be a number"},
      {Json::array({{{"messages", m}, {"completions", {yes, {{"text", 3}, {"reward", 0}}}}}}),
       "groups[0].completions[1].text: must be a string"},
      {Json::array({{{"messages", m}, {"completions", {yes, {{"reward", 0}}}}}}),
       "groups[0].completions[1]: give either text or trajectory"},
      {Json::array({{{"messages", m},
                     {"completions", {yes, {{"reward", 0}, {"trajectory", {{{"type", "thought"}, {"text", "x"}}}}}}}}}),
       "groups[0].completions[1].trajectory[0].type: must be \"action\" or \"observation\""},
      {Json::array({{{"completions", {yes, yes}}}}), "groups[0].messages: is missing"},
  };
  for (const auto& [groups, expect] : table) {
    auto r = grpo_groups(groups, q->ctx());
    ASSERT_FALSE(r.ok()) << expect;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace kiln
