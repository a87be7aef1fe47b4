// `kiln bench serve` as a user runs it, against the fake streaming server (--url): one JSON
// document on stdout with a result per concurrency level, --out, the qualification case result,
// and refusals that name the bad input. The in-process server (--model) needs a real
// ServingStack and a model, and is not exercised here.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fake_chat_server.h"
#include "test_util.h"
#include "run_command.h"

namespace kiln::loadgen {
namespace {

using testing::FakeChatServer;

using kiln::testing::CommandResult;

// Runs `kiln ARGS` through the shell, without a case-result path inherited from a qualification
// run; `redirect` chooses what is captured (e.g. "2>&1").
CommandResult kiln(const std::string& args, const std::string& redirect = "2>&1") {
  return kiln::testing::run_command("env -u KILN_QUALIFICATION_CASE_RESULT " + std::string(KILN_BINARY_PATH) + " " + args + " " +
                              redirect);
}

using kiln::testing::read_file;

// A three-prompt set named "tiny" in a fresh directory.
std::string write_prompt_set(const std::string& dir) {
  const std::string path = dir + "/tiny.jsonl";
  std::ofstream out(path);
  for (const char* id : {"a", "b", "c"}) {
    out << R"({"id": ")" << id << R"(", "messages": [{"role": "user", "content": "hello"}]})" << "\n";
  }
  return path;
}

TEST(BenchServeCli, HelpNamesTheOptionsAndBenchKeepsItsOwn) {
  CommandResult s = kiln("bench serve --help");
  EXPECT_EQ(s.code, 0);
  for (const char* w : {"--url", "--model", "--backend", "--prompt-set", "--concurrency", "--max-tokens", "--seed",
                        "--requests", "--duration", "--out"}) {
    EXPECT_NE(s.out.find(w), std::string::npos) << w << " missing from:\n" << s.out;
  }
  CommandResult b = kiln("bench --help");
  EXPECT_EQ(b.code, 0);
  for (const char* w : {"--prompt-tokens", "--decode-tokens", "--repeats", "serve"}) {
    EXPECT_NE(b.out.find(w), std::string::npos) << w << " missing from:\n" << b.out;
  }
}

TEST(BenchServeCli, RunsEachLevelAndPrintsOneJsonDocument) {
  FakeChatServer server({.first_delay_ms = 5, .gap_ms = 1, .chunks = 3});
  const std::string dir = kiln::testing::temp_dir("bench-serve");
  const std::string prompts = write_prompt_set(dir);
  CommandResult r = kiln("bench serve --url " + server.base_url() + " --model-id fake --prompt-set " + prompts +
                             " --concurrency 1,2 --max-tokens 5 --seed 9 --out " + dir + "/out.json",
                         "2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << r.out;
  EXPECT_EQ(doc["kind"], "bench_serve");
  EXPECT_EQ(doc["model"], "fake");
  EXPECT_EQ(doc["prompt_set"], "tiny");
  EXPECT_EQ(doc["max_tokens"], 5);
  ASSERT_EQ(doc["levels"].size(), 2u);
  EXPECT_EQ(doc["levels"][0]["concurrency"], 1);
  EXPECT_EQ(doc["levels"][0]["requests"], 3);  // 3 prompts, at least 2 * 1
  EXPECT_EQ(doc["levels"][0]["output_tokens"], 9);
  EXPECT_EQ(doc["levels"][1]["concurrency"], 2);
  EXPECT_EQ(doc["levels"][1]["requests"], 4);  // rounded up to a multiple of 2
  EXPECT_EQ(doc["levels"][1]["errors"], 0);
  EXPECT_GE(doc["levels"][1]["ttft_ms"]["p50"].get<double>(), 5.0);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir + "/out.json")), doc);
  EXPECT_EQ(server.bodies().size(), 1u + 3u + 4u);  // the warm-up, then the two levels
  std::filesystem::remove_all(dir);
}

TEST(BenchServeCli, WritesTheCaseResultOfItsSingleLevel) {
  FakeChatServer server({.first_delay_ms = 0, .gap_ms = 0, .chunks = 2});
  const std::string dir = kiln::testing::temp_dir("bench-serve-case");
  const std::string prompts = write_prompt_set(dir);
  const std::string result = dir + "/result.json";
  const std::string args = "bench serve --url " + server.base_url() + " --model-id fake --backend cuda --prompt-set " + prompts;

  // Without the variable nothing is written; env(1) keeps the variable to one run.
  CommandResult plain = kiln(args + " --concurrency 2 --max-tokens 4", "2>&1");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_FALSE(std::filesystem::exists(result));

  const std::string with_env = "env KILN_QUALIFICATION_CASE_RESULT=" + result + " " + KILN_BINARY_PATH + " ";
  ASSERT_EQ(std::system((with_env + args + " --concurrency 2 --max-tokens 4 >/dev/null 2>&1").c_str()), 0);
  nlohmann::json doc = nlohmann::json::parse(read_file(result), nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  EXPECT_EQ(doc["case_id"], "serve-c2");
  EXPECT_EQ(doc["status"], "passed");
  // --url without --model: the weight dtype cannot be known, and says so.
  EXPECT_EQ(doc["effective_config"], (nlohmann::json{{"backend", "cuda"}, {"dtype", "unknown"}, {"prompt_set", "tiny"}}));
  ASSERT_EQ(doc["metrics"].size(), 5u);
  EXPECT_EQ(doc["metrics"][2]["name"], "output_tokens_per_second");
  EXPECT_GT(doc["metrics"][2]["value"].get<double>(), 0.0);
  EXPECT_EQ(doc["details"]["requests"], 4);

  // A case measures one level: several are refused, naming the flag.
  std::filesystem::remove(result);
  EXPECT_NE(std::system((with_env + args + " --concurrency 1,2 >/dev/null 2>&1").c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists(result));
  std::filesystem::remove_all(dir);
}

TEST(BenchServeCli, RefusesBadInputNamingIt) {
  CommandResult r = kiln("bench serve --url http://127.0.0.1:1 --model-id m --concurrency 2,zero");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("\"zero\""), std::string::npos) << r.out;
  r = kiln("bench serve --url http://127.0.0.1:1 --model-id m --prompt-set /nonexistent/p.jsonl");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent/p.jsonl"), std::string::npos) << r.out;
}

TEST(BenchServeCli, ServerErrorsFailTheRunWithTheStatus) {
  FakeChatServer server({});
  const std::string dir = kiln::testing::temp_dir("bench-serve-503");
  CommandResult r = kiln("bench serve --url " + server.base_url() + " --model-id fake-503 --prompt-set " +
                         write_prompt_set(dir) + " --concurrency 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("HTTP 503: queue full"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::loadgen
