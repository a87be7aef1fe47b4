// The commands that call a running server (kiln adapters, train, eval, bench serve, bench
// correction) against one that has an API key: with the key from KILN_SERVER_API_KEY or
// --api-key-file (the file first) they work; without one they fail saying how to give it; a wrong
// key fails naming where it came from and what the server said.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "model/init.h"
#include "server/serving_stack.h"
#include "test_util.h"
#include "tokenizer/qwen3_fixture.h"
#include "run_command.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kKey = "k3y-for-the-cli-test";

using testing::CommandResult;

// `kiln ARGS` with KILN_SERVER_API_KEY set to `env_key` ("": unset).
CommandResult kiln(const std::string& args, const std::string& env_key) {
  const std::string key = env_key.empty() ? "-u KILN_SERVER_API_KEY" : "KILN_SERVER_API_KEY='" + env_key + "'";
  return testing::run_command("env -u KILN_QUALIFICATION_CASE_RESULT " + key + " " + std::string(KILN_BINARY_PATH) + " " +
                              args + " 2>&1");
}

// JSON a command printed on stdout after its progress lines.
json printed_json(const std::string& out) {
  const size_t at = out.find('{');
  return json::parse(at == std::string::npos ? std::string() : out.substr(at), nullptr, false);
}

// The tiny-chat preset with the Qwen3 tokenizer beside it, written once.
const std::string& chat_model() {
  static const std::string dir = [] {
    const std::string d = testing::temp_dir("cli-key-model");
    InitOptions o;
    o.quiet = true;
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), d, o).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(testing::qwen3_dir() + "/" + f, d + "/" + f);
    return d;
  }();
  return dir;
}

KilnConfig keyed_config(const std::string& dir) {
  KilnConfig c;
  c.model.path = chat_model();
  c.model.backend = "cpu";
  c.model.max_context = 512;
  c.model.adapter_dir = dir + "/adapters";
  c.server.state_dir = dir + "/state";
  c.server.port = 0;
  c.server.api_key = kKey;
  c.memory.kv_blocks = 64;
  return c;
}

std::string write_key_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  return path;
}

void expect_mentions(const CommandResult& r, std::initializer_list<std::string> words) {
  for (const std::string& w : words) EXPECT_NE(r.out.find(w), std::string::npos) << "'" << w << "' missing from:\n" << r.out;
}

class ServerKeyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("cli-key");
    auto s = ServingStack::start(keyed_config(dir_));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    stack_ = std::move(*s);
    url_ = stack_->base_url();
  }
  void TearDown() override {
    if (stack_) stack_->stop();
  }
  std::string dir_, url_;
  std::unique_ptr<ServingStack> stack_;
};

TEST_F(ServerKeyCli, WithoutAKeyEachClientSaysHowToGiveOne) {
  const std::string needs_key = "the server at " + url_ + " requires an API key: set KILN_SERVER_API_KEY or --api-key-file";
  const std::string prompts = std::string(KILN_SOURCE_DIR) + "/bench/prompts/serving-v1.jsonl";
  for (const std::string& args : {"adapters list --url " + url_, "eval list --url " + url_,
                                  "train sft --no-wait --dataset-path x.jsonl --url " + url_,
                                  "bench serve --requests 1 --max-tokens 2 --prompt-set " + prompts + " --url " + url_,
                                  "bench serve --model-id m --requests 1 --max-tokens 2 --prompt-set " + prompts + " --url " + url_,
                                  "bench correction --tokens 32 --repeats 1 --url " + url_}) {
    SCOPED_TRACE(args);
    const CommandResult r = kiln(args, "");
    EXPECT_EQ(r.code, 1) << r.out;
    expect_mentions(r, {needs_key, "HTTP 401"});
  }
}

TEST_F(ServerKeyCli, TheKeyFromTheEnvironmentOrTheFlagFileIsSent) {
  CommandResult r = kiln("adapters list --url " + url_, kKey);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(printed_json(r.out)["data"].is_array()) << r.out;
  r = kiln("eval list --url " + url_, kKey);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(printed_json(r.out)["data"].is_array()) << r.out;

  // --api-key-file comes first: a wrong key in the environment does not matter then.
  const std::string good = write_key_file(dir_ + "/good-key", std::string(kKey) + "\n# anything after the first line\n");
  r = kiln("adapters list --api-key-file " + good + " --url " + url_, "not-the-key");
  ASSERT_EQ(r.code, 0) << r.out;

  // A training job is queued (and cancelled again, so that the server stops at once).
  const std::string data = dir_ + "/data.jsonl";
  std::ofstream(data) << R"({"messages": [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]})"
                      << "\n";
  r = kiln("train sft --no-wait --file " + data + " --config-json '{\"lora_rank\": 2}' --url " + url_, kKey);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string job = printed_json(r.out).value("job_id", "");
  ASSERT_FALSE(job.empty()) << r.out;
  httplib::Client client("127.0.0.1", stack_->port());
  client.set_bearer_token_auth(kKey);
  auto cancelled = client.Delete(("/v1/train/queue/" + job).c_str());
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(cancelled->status, 200) << cancelled->body;

  // The load generator's streams and its model lookup carry the key.
  r = kiln("bench serve --requests 2 --max-tokens 2 --prompt-set " + std::string(KILN_SOURCE_DIR) +
               "/bench/prompts/serving-v1.jsonl --url " + url_,
           kKey);
  ASSERT_EQ(r.code, 0) << r.out;
  const json serve = printed_json(r.out);
  EXPECT_EQ(serve["levels"][0]["requests"], 2) << r.out;
  EXPECT_EQ(serve["levels"][0]["errors"], 0) << r.out;
}

TEST_F(ServerKeyCli, AWrongKeyIsRefusedNamingWhereItCameFrom) {
  CommandResult r = kiln("adapters list --url " + url_, "not-the-key");
  EXPECT_EQ(r.code, 1) << r.out;
  expect_mentions(r, {"the server at " + url_ + " refused the API key of KILN_SERVER_API_KEY",
                      "the API key in the Authorization header is not this server's"});
  const std::string wrong = write_key_file(dir_ + "/wrong-key", "not-the-key\n");
  r = kiln("bench serve --model-id m --requests 1 --max-tokens 2 --prompt-set " + std::string(KILN_SOURCE_DIR) +
               "/bench/prompts/serving-v1.jsonl --api-key-file " + wrong + " --url " + url_,
           kKey);
  EXPECT_EQ(r.code, 1) << r.out;
  expect_mentions(r, {"refused the API key of --api-key-file " + wrong, "not this server's"});
  // A key file without a key is refused before any request, naming the flag and the file.
  const std::string blank = write_key_file(dir_ + "/blank-key", "  \n" + std::string(kKey) + "\n");
  r = kiln("eval list --api-key-file " + blank + " --url " + url_, kKey);
  EXPECT_EQ(r.code, 1) << r.out;
  expect_mentions(r, {"--api-key-file: " + blank + " holds no key on its first line"});
}

// `kiln bench correction` against a keyed server, given by --url (the key from the environment)
// and in-process (the server's key from KILN_SERVER_API_KEY, which its client then sends too).
TEST_F(ServerKeyCli, BenchCorrectionSendsTheKeyToEitherServer) {
  const std::string bench = "bench correction --tokens 32 --repeats 1 --lora-rank 2 --optimizer adam_w ";
  CommandResult r = kiln(bench + "--url " + url_, kKey);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(printed_json(r.out)["runs"][0]["adapter_revision"], 1) << r.out;
  r = kiln(bench + "--model " + chat_model() + " --backend cpu --set model.max_context=512 --set memory.kv_blocks=64 " +
               "--set server.state_dir=" + dir_ + "/bench-state",
           kKey);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(printed_json(r.out)["runs"][0]["adapter_revision"], 1) << r.out;
}

TEST(ServerKeyCliHelp, EachClientCommandNamesTheKeyFlagAndVariable) {
  for (const char* cmd : {"train sft", "train grpo", "adapters list", "adapters load", "adapters unload", "adapters delete",
                          "eval list", "eval run", "eval compare", "bench serve", "bench correction"}) {
    SCOPED_TRACE(cmd);
    const CommandResult r = kiln(std::string(cmd) + " --help", "");
    EXPECT_EQ(r.code, 0) << r.out;
    expect_mentions(r, {"--api-key-file", "KILN_SERVER_API_KEY", "Authorization: Bearer"});
  }
}

}  // namespace
}  // namespace kiln
