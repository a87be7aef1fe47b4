// `kiln config` as a user runs it: flags, the environment and --config reach the printed
// configuration with their sources, and bad configuration exits 1 naming the problem.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config_reference.h"
#include "test_util.h"

namespace kiln {
namespace {

struct CommandResult {
  int code;
  std::string out;
};

class ConfigCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::temp_dir("config-cli"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs in an empty folder (no ./kiln.toml) with no KILN_ configuration inherited; `env` goes
  // before the binary ("KILN_SERVER_PORT=1"). Stdout only, unless with_stderr.
  CommandResult kiln(const std::string& args, const std::string& env = "", bool with_stderr = false) {
    std::string cmd = "cd " + dir_ + " && env -u KILN_CONFIG ";
    for (const char* v : {"KILN_SERVER_PORT", "KILN_SERVER_HOST", "KILN_SERVER_PROFILE"}) cmd += std::string("-u ") + v + " ";
    cmd += env + " " + KILN_BINARY_PATH + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
    CommandResult r{-1, ""};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }

  nlohmann::json json_of(const std::string& args, const std::string& env = "") {
    CommandResult r = kiln(args, env);
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  std::string dir_;
};

TEST_F(ConfigCli, SetReportsTheValueWithSourceFlag) {
  nlohmann::json j = json_of("config --set server.port=9000 --json");
  EXPECT_EQ(j["server"]["port"]["value"], 9000);
  EXPECT_EQ(j["server"]["port"]["source"], "flag");
  EXPECT_EQ(j["server"]["host"]["source"], "default");
}

TEST_F(ConfigCli, UnknownKeyFailsNamingIt) {
  CommandResult r = kiln("config --set server.nope=1", "", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("server.nope"), std::string::npos) << r.out;
}

TEST_F(ConfigCli, ShorthandsAndSetApplyInCommandLineOrder) {
  nlohmann::json j = json_of("config --port 9001 --set server.port=9002 --profile maintenance --backend cpu "
                             "--model /m --host 0.0.0.0 --json");
  EXPECT_EQ(j["server"]["port"], nlohmann::json({{"value", 9002}, {"source", "flag"}, {"flag", "--set server.port"}}));
  EXPECT_EQ(j["server"]["profile"], nlohmann::json({{"value", "maintenance"}, {"source", "flag"}, {"flag", "--profile"}}));
  EXPECT_EQ(j["model"]["backend"]["value"], "cpu");
  EXPECT_EQ(j["model"]["path"]["value"], "/m");
  EXPECT_EQ(j["server"]["host"]["value"], "0.0.0.0");
  j = json_of("config --set server.port=9002 --port 9001 --json");
  EXPECT_EQ(j["server"]["port"]["value"], 9001);
}

TEST_F(ConfigCli, ReadsTheEnvironmentAndTheFiles) {
  std::ofstream(dir_ + "/kiln.toml") << "[server]\nport = 7001\n";
  std::ofstream(dir_ + "/other.toml") << "[server]\nport = 7002\nhost = \"0.0.0.0\"\n";
  nlohmann::json j = json_of("config --json");
  EXPECT_EQ(j["server"]["port"], nlohmann::json({{"value", 7001}, {"source", "file"}, {"file", "kiln.toml"}}));
  j = json_of("config --config other.toml --json", "KILN_SERVER_PORT=7003");
  EXPECT_EQ(j["server"]["port"], nlohmann::json({{"value", 7003}, {"source", "env"}, {"env", "KILN_SERVER_PORT"}}));
  EXPECT_EQ(j["server"]["host"]["source"], "file");
  CommandResult r = kiln("config", "KILN_CONFIG=other.toml");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("server.port = 7002  (file other.toml)\n"), std::string::npos) << r.out;
}

TEST_F(ConfigCli, BadConfigurationExitsOneListingEveryProblem) {
  CommandResult r = kiln("config --config missing.toml --set server.port=x --set logging.level=loud", "", true);
  EXPECT_EQ(r.code, 1);
  for (const char* w : {"3 problems", "missing.toml (named by --config)", "'x' is not an integer",
                        "'loud' is not one of error, warn, info, debug"})
    EXPECT_NE(r.out.find(w), std::string::npos) << "'" << w << "' missing from:\n" << r.out;
  r = kiln("config --set server.port", "", true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("expected KEY=VALUE, got 'server.port'"), std::string::npos) << r.out;
}

TEST_F(ConfigCli, MarkdownPrintsTheReference) {
  CommandResult r = kiln("config --markdown");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, config_reference_markdown());
}

TEST_F(ConfigCli, HelpNamesTheSharedFlags) {
  CommandResult r = kiln("config --help");
  EXPECT_EQ(r.code, 0);
  for (const char* w : {"--config", "--set", "--host", "--port", "--model", "--backend", "--profile", "--json", "--markdown"})
    EXPECT_NE(r.out.find(w), std::string::npos) << "'" << w << "' missing from:\n" << r.out;
}

}  // namespace
}  // namespace kiln
