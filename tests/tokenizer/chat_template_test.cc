// The Qwen3 chat template rendered by Kiln against Python Jinja2 configured as transformers'
// apply_chat_template (tools/tokenizer/render_templates_jinja2.py): byte-identical output for
// every case, and failure wherever Python fails.
#include <gtest/gtest.h>

#include <fstream>

#include "qwen3_fixture.h"
#include "tokenizer/chat_template.h"

namespace kiln {
namespace {

using testing::fixture_path;
using testing::qwen3_dir;
using testing::read_jsonl;

nlohmann::ordered_json read_cases() {
  std::ifstream in(fixture_path("conversations.json"));
  EXPECT_TRUE(in.good());
  return nlohmann::ordered_json::parse(in);
}

ChatTemplateRequest request_of(const nlohmann::ordered_json& c) {
  ChatTemplateRequest r;
  r.messages = c["messages"];
  if (c.contains("tools")) r.tools = c["tools"];
  r.generation_prompt = c["add_generation_prompt"].get<bool>() ? GenerationPrompt::kAdd : GenerationPrompt::kOmit;
  if (c.contains("enable_thinking")) r.variables["enable_thinking"] = c["enable_thinking"];
  return r;
}

TEST(ChatTemplate, Qwen3RendersEveryConversationLikeTransformers) {
  auto tmpl = ChatTemplate::load(qwen3_dir());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string() << " (run scripts/fetch-tokenizer)";
  const auto cases = read_cases();
  const auto expected = read_jsonl(fixture_path("chat_template_expected.jsonl"));
  ASSERT_EQ(cases.size(), expected.size());
  ASSERT_GE(cases.size(), 50u);
  size_t rendered = 0, errors = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = cases[i]["name"];
    ASSERT_EQ(expected[i]["name"], name);
    auto out = tmpl->render(request_of(cases[i]));
    if (expected[i].contains("error")) {
      EXPECT_FALSE(out.ok()) << name << ": Python raised " << expected[i]["error"] << " but Kiln rendered";
      if (!out.ok()) ++errors;
      continue;
    }
    ASSERT_TRUE(out.ok()) << name << ": " << out.status().to_string();
    EXPECT_EQ(out.value(), expected[i]["rendered"].get<std::string>()) << name;
    if (out.value() == expected[i]["rendered"].get<std::string>()) ++rendered;
  }
  EXPECT_EQ(rendered + errors, cases.size());
}

// Llama 3.1, Gemma 3 and DeepSeek V3 templates (tools/tokenizer/make_other_templates.py).
TEST(ChatTemplate, OtherModelFamiliesRenderLikeTransformers) {
  std::ifstream in(fixture_path("other_templates.json"));
  const auto models = nlohmann::ordered_json::parse(in);
  ASSERT_EQ(models.size(), 3u);
  for (const auto& m : models) {
    const std::string model = m["model"];
    auto tmpl = ChatTemplate::from_source(m["chat_template"].get<std::string>(), m["tokenizer_config"]);
    ASSERT_TRUE(tmpl.ok()) << model << ": " << tmpl.status().to_string();
    for (size_t i = 0; i < m["cases"].size(); ++i) {
      const auto& c = m["cases"][i];
      ChatTemplateRequest r;
      r.messages = c["messages"];
      r.generation_prompt = c["add_generation_prompt"].get<bool>() ? GenerationPrompt::kAdd : GenerationPrompt::kOmit;
      auto out = tmpl->render(r);
      if (c.contains("error")) {
        EXPECT_FALSE(out.ok()) << model << " case " << i << ": Python raised " << c["error"];
        continue;
      }
      ASSERT_TRUE(out.ok()) << model << " case " << i << ": " << out.status().to_string();
      EXPECT_EQ(out.value(), c["expected"].get<std::string>()) << model << " case " << i;
    }
  }
}

TEST(ChatTemplate, MissingTemplateIsNotFound) {
  auto tmpl = ChatTemplate::load(std::string(KILN_FIXTURES_DIR) + "/tokenizer/no-such-dir");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kiln
