// Prompt sets: errors name the line and the field; the committed serving set has its shape.
#include "loadgen/prompt_set.h"

#include <gtest/gtest.h>

namespace kiln::loadgen {
namespace {

const char* kGood =
    "{\"id\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n"
    "\n"
    "{\"id\": \"b\", \"messages\": [{\"role\": \"user\", \"content\": \"yo\"}], \"max_tokens\": 16}\n";

TEST(PromptSet, ParsesLinesAndSkipsBlankOnes) {
  Result<PromptSet> set = parse_prompt_set(kGood, "p.jsonl");
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_EQ(set->prompts.size(), 2u);
  EXPECT_EQ(set->prompts[0].id, "a");
  EXPECT_EQ(set->prompts[0].messages[0]["content"], "hi");
  EXPECT_FALSE(set->prompts[0].max_tokens.has_value());
  EXPECT_EQ(set->prompts[1].max_tokens.value_or(0), 16);
}

struct BadCase {
  const char* name;
  std::string text;
  std::string expected;  // a substring of the error message
};

TEST(PromptSet, ErrorsNameTheLineAndTheField) {
  const std::string ok_line = "{\"id\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
  const BadCase cases[] = {
      {"bad json", ok_line + ok_line.substr(0, 20) + "\n", "p.jsonl:2: not valid JSON"},
      {"bad json after blank", ok_line + "\n{nope}\n", "p.jsonl:3: not valid JSON"},
      {"missing messages", "{\"id\": \"a\"}\n", "p.jsonl:1: field \"messages\" is missing"},
      {"empty messages", "{\"id\": \"a\", \"messages\": []}\n", "p.jsonl:1: field \"messages\" must be a non-empty array"},
      {"message without role", "{\"id\": \"a\", \"messages\": [{\"content\": \"x\"}]}\n", "p.jsonl:1: field \"messages[0]\""},
      {"missing id", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n", "p.jsonl:1: field \"id\""},
      {"repeated id", ok_line + ok_line, "p.jsonl:2: field \"id\" repeats \"a\""},
      {"zero max_tokens", "{\"id\": \"a\", \"messages\": [{\"role\": \"user\"}], \"max_tokens\": 0}\n", "p.jsonl:1: field \"max_tokens\""},
      {"unknown field", "{\"id\": \"a\", \"messages\": [{\"role\": \"user\"}], \"prompt\": \"x\"}\n", "p.jsonl:1: unknown field \"prompt\""},
      {"not an object", "[1, 2]\n", "p.jsonl:1: a prompt is a JSON object"},
      {"empty", "\n\n", "p.jsonl: the prompt set has no prompts"},
  };
  for (const BadCase& c : cases) {
    Result<PromptSet> set = parse_prompt_set(c.text, "p.jsonl");
    ASSERT_FALSE(set.ok()) << c.name;
    EXPECT_NE(set.status().message().find(c.expected), std::string::npos) << c.name << ": " << set.status().message();
  }
}

TEST(PromptSet, MissingFileIsNamed) {
  Result<PromptSet> set = load_prompt_set("/nonexistent/prompts.jsonl");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(set.status().message().find("/nonexistent/prompts.jsonl"), std::string::npos);
}

TEST(PromptSet, CommittedServingSetHasSixtyFourVariedPrompts) {
  Result<PromptSet> set = load_prompt_set(std::string(KILN_SOURCE_DIR) + "/bench/prompts/serving-v1.jsonl");
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->name, "serving-v1");
  ASSERT_EQ(set->prompts.size(), 64u);
  int multi_turn = 0, long_system = 0;
  for (size_t i = 0; i < set->prompts.size(); ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "s%03zu", i + 1);
    EXPECT_EQ(set->prompts[i].id, id);
    bool has_assistant = false;
    for (const nlohmann::json& m : set->prompts[i].messages) {
      if (m["role"] == "assistant") has_assistant = true;
      if (m["role"] == "system" && m["content"].get<std::string>().size() >= 1000) ++long_system;
    }
    multi_turn += has_assistant;
    EXPECT_EQ(set->prompts[i].messages.back()["role"], "user") << id << " must end with a user turn";
  }
  EXPECT_GE(multi_turn, 3);
  EXPECT_GE(long_system, 3);
}

}  // namespace
}  // namespace kiln::loadgen
