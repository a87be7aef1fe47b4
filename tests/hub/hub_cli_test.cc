// The kiln binary with a Hub name, against the mock Hub (its CDN over HTTPS): `kiln serve --model
// ORG/NAME` fetches the tiny-chat model into a fresh Hugging Face cache and answers a chat
// completion with it; `kiln model list` and `kiln model rm` see and remove it; HF_HUB_OFFLINE
// refuses a name the cache lacks, naming it; `kiln capabilities --model ORG/NAME` resolves it the
// same way, through HTTP(S)_PROXY when set.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "hub/hub_fixture.h"
#include "hub/test_proxy.h"
#include "run_command.h"
#include "tokenizer/qwen3_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;

// `kiln ARGS` with the hub's environment, stdout and stderr together.
CommandResult kiln(const std::string& env, const std::string& args) {
  return testing::run_command(env + " " + KILN_BINARY_PATH + " " + args + " 2>&1");
}

class HubCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string model = testing::temp_dir("tiny-chat");
    ASSERT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), model, {.quiet = true}).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(testing::qwen3_dir() + "/" + f, model + "/" + f);
    env_.hub->add_repo(testing::MockRepo::from_dir("org/tiny-chat", model));
    home_ = testing::temp_dir("home");
    vars_ = "env -u HF_TOKEN -u HF_HOME -u HF_HUB_OFFLINE -u https_proxy -u HTTPS_PROXY -u http_proxy -u HTTP_PROXY "
            "-u no_proxy -u NO_PROXY HOME=" + home_ + " XDG_CACHE_HOME=" + home_ +
            "/xdg HF_HUB_CACHE=" + env_.cache + " HF_ENDPOINT=" + env_.hub->endpoint() +
            " SSL_CERT_FILE=" + env_.hub->ca_file();
  }
  testing::HubEnv env_;
  std::string home_, vars_;
};

TEST_F(HubCli, ServeFetchesANameAndAnswersAChat) {
  const std::string err = home_ + "/serve.err";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec " + vars_ + " " + KILN_BINARY_PATH + " serve --model org/tiny-chat --port 0 --backend cpu" +
                            " --set model.max_context=256 --set server.state_dir=" + home_ + "/state 2>" + err;
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  std::smatch m;
  std::string log;
  const std::regex serving("kiln: serving '([^']*)' at http://127\\.0\\.0\\.1:([0-9]+)");
  for (int i = 0; i < 1200 && !std::regex_search(log, m, serving); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log = testing::read_all(err);
    if (waitpid(pid, nullptr, WNOHANG) == pid) break;
  }
  ASSERT_TRUE(std::regex_search(log, m, serving)) << log;
  EXPECT_EQ(m[1].str(), "org/tiny-chat");  // a name is the served model id
  EXPECT_NE(log.find("org/tiny-chat is not in the Hugging Face cache"), std::string::npos) << log;
  httplib::Client cli("127.0.0.1", std::stoi(m[2].str()));
  cli.set_read_timeout(60, 0);
  const nlohmann::json body = {{"model", "org/tiny-chat"},
                               {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                               {"max_tokens", 3},
                               {"temperature", 0}};
  auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << res->body;
  EXPECT_EQ(j["model"], "org/tiny-chat");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_GE(j["usage"]["completion_tokens"].get<int>(), 1);
  // The weights came from the CDN, over TLS, without the token (none was set).
  int cdn = 0;
  for (const auto& q : env_.hub->requests()) cdn += q.server == "cdn";
  EXPECT_EQ(cdn, 1);
}

TEST_F(HubCli, PullListAndRemove) {
  CommandResult pull = kiln(vars_, "model pull org/tiny-chat");
  ASSERT_EQ(pull.code, 0) << pull.out;
  EXPECT_NE(pull.out.find(env_.cache + "/models--org--tiny-chat/snapshots/"), std::string::npos) << pull.out;
  CommandResult list = kiln(vars_, "model list");
  ASSERT_EQ(list.code, 0) << list.out;
  EXPECT_NE(list.out.find("org/tiny-chat"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("main"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("yes"), std::string::npos) << list.out;
  // A model Kiln cannot serve says why.
  const std::string other = env_.cache + "/models--org--moe/snapshots/3333333333333333333333333333333333333333";
  testing::write_all(other + "/config.json", R"({"architectures":["Qwen3_5MoeForConditionalGeneration"]})");
  CommandResult json = kiln(vars_, "model list --json");
  ASSERT_EQ(json.code, 0) << json.out;
  auto j = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_TRUE(j.is_array()) << json.out;
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["model"], "org/moe");
  EXPECT_FALSE(j[0]["servable"].get<bool>());
  EXPECT_NE(j[0]["problem"].get<std::string>().find("Qwen3_5MoeForConditionalGeneration"), std::string::npos);
  EXPECT_EQ(j[1]["model"], "org/tiny-chat");
  EXPECT_TRUE(j[1]["servable"].get<bool>()) << j[1].dump();
  EXPECT_EQ(j[1]["architecture"], "Qwen3_5ForCausalLM");

  CommandResult rm = kiln(vars_, "model rm org/tiny-chat");
  ASSERT_EQ(rm.code, 0) << rm.out;
  EXPECT_FALSE(fs::exists(env_.cache + "/models--org--tiny-chat"));
  CommandResult again = kiln(vars_, "model rm org/tiny-chat");
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.out.find("is not in the Hugging Face cache"), std::string::npos) << again.out;
}

TEST_F(HubCli, CapabilitiesTakesAHubNameAndPullsGoThroughTheProxy) {
  auto proxy = testing::TestProxy::start();
  ASSERT_NE(proxy, nullptr);
  const std::string via = " HTTP_PROXY=" + proxy->url() + " https_proxy=" + proxy->url();
  CommandResult r = kiln(vars_ + via, "capabilities --json --backend cpu --model org/tiny-chat");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"org/tiny-chat\""), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_TRUE(fs::exists(env_.cache + "/models--org--tiny-chat/refs/main"));
  EXPECT_EQ(proxy->tunnels(), 1);  // the weights from the CDN, over TLS
  EXPECT_GE(proxy->relayed(), 1);  // the Hub's API
  // The same name from the cache, offline: no request at all.
  env_.hub->clear_requests();
  CommandResult offline = kiln(vars_ + " HF_HUB_OFFLINE=1", "capabilities --json --backend cpu --model org/tiny-chat");
  ASSERT_EQ(offline.code, 0) << offline.out;
  EXPECT_TRUE(env_.hub->requests().empty());
}

TEST_F(HubCli, OfflineRefusesANameTheCacheLacksAndHelpTellsTheRules) {
  CommandResult r = kiln(vars_ + " HF_HUB_OFFLINE=1", "generate --model org/tiny-chat --prompt-ids 1,2 --max-tokens 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("HF_HUB_OFFLINE is set and org/tiny-chat is not in the Hugging Face cache"), std::string::npos) << r.out;
  EXPECT_TRUE(env_.hub->requests().empty());
  CommandResult bad = kiln(vars_, "serve --model not/a/name");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("model.path"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("ORG/NAME[@REVISION]"), std::string::npos) << bad.out;
  CommandResult help = kiln("", "serve --help");
  for (const char* w : {"ORG/NAME[@REVISION]", "HF_HUB_CACHE", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN"})
    EXPECT_NE(help.out.find(w), std::string::npos) << w << "\n" << help.out;
  CommandResult mhelp = kiln("", "model --help");
  for (const char* w : {"pull", "list", "rm", "init"}) EXPECT_NE(mhelp.out.find(w), std::string::npos) << w;
}

}  // namespace
}  // namespace kiln
