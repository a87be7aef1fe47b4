// `kiln tokenize` and `kiln chat-template` end to end: the binary's output against the same
// oracles as the library tests (HF tokenizers ids, Python Jinja2 renders).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "qwen3_fixture.h"

namespace kiln {
namespace {

using testing::fixture_path;
using testing::qwen3_dir;
using testing::read_jsonl;

struct CommandResult {
  int status;
  std::string out;
};

CommandResult run(const std::string& args) {
  const std::string command = std::string(KILN_BINARY_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  return {pclose(pipe), out};
}

TEST(TokenizeCli, EncodesAndDecodes) {
  ASSERT_NE(testing::qwen3(), nullptr);
  const CommandResult encoded = run("tokenize --tokenizer " + qwen3_dir() + " 'Hello, world!'");
  ASSERT_EQ(encoded.status, 0) << encoded.out;
  const auto j = nlohmann::json::parse(encoded.out);
  // HF tokenizers' ids for corpus line 1, "Hello, world!".
  EXPECT_EQ(j["ids"], nlohmann::json::parse("[9707, 11, 1879, 0]"));
  EXPECT_EQ(j["tokens"], nlohmann::json::parse(R"(["Hello", ",", " world", "!"])"));
  const CommandResult decoded = run("tokenize --tokenizer " + qwen3_dir() + " --decode 9707,11,1879,0");
  ASSERT_EQ(decoded.status, 0) << decoded.out;
  EXPECT_EQ(decoded.out, "Hello, world!\n");
}

TEST(TokenizeCli, UnknownIdFailsWithItsNumber) {
  const CommandResult r = run("tokenize --tokenizer " + qwen3_dir() + " --decode 5,9999999");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("9999999"), std::string::npos) << r.out;
}

TEST(TokenizeCli, ChatTemplateMatchesTheOracle) {
  std::ifstream in(fixture_path("conversations.json"));
  const auto cases = nlohmann::ordered_json::parse(in);
  const auto expected = read_jsonl(fixture_path("chat_template_expected.jsonl"));
  // The multi-turn tool-call conversation with tools, generation prompt and thinking off.
  size_t i = 0;
  while (i < cases.size() && cases[i]["name"] != "tool_call_round_trip/gen=yes/thinking=false") ++i;
  ASSERT_LT(i, cases.size());
  const std::string messages_path = ::testing::TempDir() + "/kiln_messages.json";
  const std::string tools_path = ::testing::TempDir() + "/kiln_tools.json";
  std::ofstream(messages_path) << cases[i]["messages"].dump();
  std::ofstream(tools_path) << cases[i]["tools"].dump();
  const CommandResult r = run("chat-template --tokenizer " + qwen3_dir() + " --messages " + messages_path + " --tools " +
                    tools_path + " --add-generation-prompt --enable-thinking false");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, expected[i]["rendered"].get<std::string>());
}

TEST(TokenizeCli, ChatTemplateRejectsABadThinkingFlag) {
  const std::string messages_path = ::testing::TempDir() + "/kiln_messages_min.json";
  std::ofstream(messages_path) << R"([{"role": "user", "content": "hi"}])";
  const CommandResult r = run("chat-template --tokenizer " + qwen3_dir() + " --messages " + messages_path + " --enable-thinking maybe");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("maybe"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
