// load_config: the four levels and their precedence per field, the sources it records, which file
// it reads, and every kind of problem, all reported together with the key and where it came from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/config_loader.h"
#include "config/config_schema.h"
#include "test_util.h"

namespace kiln {
namespace {

class ConfigLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("config");
    in_.default_file = "";  // nothing from the working directory
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // The error message of a load that must fail.
  std::string error() {
    auto r = load_config(in_);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return "";
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    return r.status().message();
  }

  ResolvedConfig loaded() {
    auto r = load_config(in_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value() : ResolvedConfig{};
  }

  std::string dir_;
  ConfigInputs in_;
};

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "'" << (needle) << "' missing from:\n" << (haystack)

TEST_F(ConfigLoader, DefaultsWhenNothingIsGiven) {
  ResolvedConfig r = loaded();
  EXPECT_EQ(r.config.server.port, 8420);
  EXPECT_EQ(r.file, "");
  EXPECT_EQ(r.origins.size(), 58u);
  for (const auto& [name, origin] : r.origins) {
    EXPECT_EQ(origin.source, ConfigSource::kDefault) << name;
    EXPECT_EQ(origin.where, "") << name;
  }
}

// For one field of every type: values at every level up to `top`; the top one wins and is recorded.
TEST_F(ConfigLoader, EachLevelWinsOverTheOnesBelowPerField) {
  struct Case {
    const char* name;
    const char* env;
    const char* file_line;  // under the section header
    const char* env_text;
    const char* flag_text;
  };
  const Case cases[] = {
      {"server.port", "KILN_SERVER_PORT", "port = 9001", "9002", "9003"},
      {"memory.memory_fraction", "KILN_MEMORY_MEMORY_FRACTION", "memory_fraction = 0.25", "0.5", "0.75"},
      {"prefix_cache.enabled", "KILN_PREFIX_CACHE_ENABLED", "enabled = false", "1", "false"},
      {"model.backend", "KILN_MODEL_BACKEND", "backend = \"cpu\"", "cuda", "cpu"},
      {"server.host", "KILN_SERVER_HOST", "host = \"0.0.0.0\"", "::1", "localhost"},
  };
  const std::string expected[][3] = {
      {"9001", "9002", "9003"},
      {"0.25", "0.5", "0.75"},
      {"false", "true", "false"},
      {"\"cpu\"", "\"cuda\"", "\"cpu\""},
      {"\"0.0.0.0\"", "\"::1\"", "\"localhost\""},
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    const Case& k = cases[c];
    const std::string name = k.name, section = name.substr(0, name.find('.'));
    const std::string path = write("levels.toml", "[" + section + "]\n" + k.file_line + "\n");
    for (int top = 0; top < 3; ++top) {  // 0 file, 1 env, 2 flag
      in_ = ConfigInputs{};
      in_.default_file = "";
      in_.config_path = path;
      if (top >= 1) in_.env[k.env] = k.env_text;
      if (top >= 2) in_.flags.push_back({name, k.flag_text, ""});
      ResolvedConfig r = loaded();
      const ConfigField* f = find_config_field(name);
      EXPECT_EQ(format_config_value(f->get(r.config)), expected[c][top]) << name << " top " << top;
      const FieldOrigin& o = r.origins.at(name);
      const ConfigSource want[] = {ConfigSource::kFile, ConfigSource::kEnv, ConfigSource::kFlag};
      const std::string where[] = {path, k.env, "--set " + name};
      EXPECT_EQ(o.source, want[top]) << name << " top " << top;
      EXPECT_EQ(o.where, where[top]) << name << " top " << top;
      EXPECT_EQ(r.origins.at("server.max_batch_tokens").source, ConfigSource::kDefault);
    }
  }
}

TEST_F(ConfigLoader, LevelsMixPerField) {
  in_.config_path = write("k.toml", "[server]\nport = 9001\nhost = \"0.0.0.0\"\n[memory]\nkv_blocks = 100\n");
  in_.env["KILN_SERVER_PORT"] = "9002";
  in_.env["KILN_LOGGING_LEVEL"] = "debug";
  in_.flags.push_back({"memory.kv_blocks", "200", "--set memory.kv_blocks"});
  ResolvedConfig r = loaded();
  EXPECT_EQ(r.file, in_.config_path);
  EXPECT_EQ(r.config.server.port, 9002);
  EXPECT_EQ(r.config.server.host, "0.0.0.0");
  EXPECT_EQ(r.config.memory.kv_blocks, 200);
  EXPECT_EQ(r.config.logging.level, "debug");
  EXPECT_EQ(r.config.server.max_decode_batch, 64);
  EXPECT_EQ(r.origins.at("server.port").source, ConfigSource::kEnv);
  EXPECT_EQ(r.origins.at("server.host").source, ConfigSource::kFile);
  EXPECT_EQ(r.origins.at("memory.kv_blocks").source, ConfigSource::kFlag);
  EXPECT_EQ(r.origins.at("logging.level").source, ConfigSource::kEnv);
  EXPECT_EQ(r.origins.at("server.max_decode_batch").source, ConfigSource::kDefault);
}

TEST_F(ConfigLoader, TheLastFlagForAKeyWins) {
  in_.flags = {{"server.port", "1", "--port"}, {"server.port", "2", ""}, {"server.profile", "maintenance", "--profile"}};
  ResolvedConfig r = loaded();
  EXPECT_EQ(r.config.server.port, 2);
  EXPECT_EQ(r.origins.at("server.port").where, "--set server.port");
  EXPECT_EQ(r.config.server.profile, "maintenance");
  EXPECT_EQ(r.origins.at("server.profile").where, "--profile");
}

TEST_F(ConfigLoader, IntegersAreAcceptedForFloatsInTheFile) {
  in_.config_path = write("k.toml", "[memory]\nmemory_fraction = 1\n");
  EXPECT_DOUBLE_EQ(loaded().config.memory.memory_fraction, 1.0);
}

TEST_F(ConfigLoader, FileChoiceConfigFlagThenKilnConfigThenDefaultFile) {
  const std::string a = write("a.toml", "[server]\nport = 1001\n");
  const std::string b = write("b.toml", "[server]\nport = 1002\n");
  const std::string d = write("kiln.toml", "[server]\nport = 1003\n");
  in_.default_file = d;
  EXPECT_EQ(loaded().config.server.port, 1003);
  in_.env["KILN_CONFIG"] = b;
  EXPECT_EQ(loaded().config.server.port, 1002);
  EXPECT_EQ(loaded().file, b);
  in_.config_path = a;
  EXPECT_EQ(loaded().config.server.port, 1001);
  EXPECT_EQ(loaded().origins.at("server.port").where, a);
}

TEST_F(ConfigLoader, AMissingDefaultFileIsNoError) {
  in_.default_file = dir_ + "/kiln.toml";
  ResolvedConfig r = loaded();
  EXPECT_EQ(r.file, "");
  EXPECT_EQ(r.config.server.port, 8420);
}

TEST_F(ConfigLoader, AnExplicitlyNamedMissingFileIsAnError) {
  in_.config_path = dir_ + "/nope.toml";
  EXPECT_EQ(error(), "invalid configuration: " + dir_ + "/nope.toml (named by --config): configuration file does not exist");
  in_.config_path = "";
  in_.env["KILN_CONFIG"] = dir_ + "/gone.toml";
  EXPECT_EQ(error(), "invalid configuration: " + dir_ + "/gone.toml (named by KILN_CONFIG): configuration file does not exist");
}

TEST_F(ConfigLoader, UnknownKeyInTheFileIsNamedWithItsPosition) {
  const std::string path = write("k.toml", "[server]\nport = 1\nprot = 2\n");
  in_.config_path = path;
  EXPECT_EQ(error(), "invalid configuration: " + path +
                         ":3:1: unknown key server.prot (keys of [server]: host, port, max_batch_tokens, "
                         "max_decode_batch, max_queued_requests, request_timeout_secs, max_body_bytes, "
                         "max_adapter_bytes, http_threads, profile, api_key, api_key_file, metrics_public, allowed_hosts, "
                         "allowed_origins, state_dir, max_loaded_adapters, max_adapter_memory_bytes)");
}

TEST_F(ConfigLoader, UnknownSectionAndTopLevelKeys) {
  const std::string path = write("k.toml", "port = 1\n[servr]\nport = 1\n[server.tls]\ncert = \"x\"\n");
  in_.config_path = path;
  const std::string e = error();
  EXPECT_CONTAINS(e, path + ":1:1: unknown key port at the top level");
  EXPECT_CONTAINS(e, path + ":2:2: unknown section [servr] (sections: server, model, memory, batching, prefix_cache, training, logging, vulkan)");
  EXPECT_CONTAINS(e, path + ":4:9: unknown key server.tls");
}

TEST_F(ConfigLoader, WrongTomlTypesNameTheKeyAndBothTypes) {
  const std::string path = write("k.toml",
                                 "[server]\nport = \"8420\"\n[memory]\nkv_cache_fp8 = 1\n"
                                 "[logging]\nlevel = 3\n[[model]]\npath = \"x\"\n");
  in_.config_path = path;
  const std::string e = error();
  EXPECT_CONTAINS(e, path + ":2:8: server.port: expected an integer, got a string");
  EXPECT_CONTAINS(e, path + ":4:16: memory.kv_cache_fp8: expected a bool, got an integer");
  EXPECT_CONTAINS(e, path + ":6:9: logging.level: expected a string, got an integer");
  EXPECT_CONTAINS(e, "model: expected a table, got an array");
}

TEST_F(ConfigLoader, OutOfRangeValuesNameTheAllowedRange) {
  const std::string path = write("k.toml",
                                 "[server]\nport = 70000\nmax_decode_batch = 0\nmax_batch_tokens = 8\n"
                                 "[memory]\nmemory_fraction = 0.0\nkv_blocks = -1\n");
  in_.config_path = path;
  const std::string e = error();
  EXPECT_CONTAINS(e, path + ":2:8: server.port: 70000 is out of range (allowed: 0..65535)");
  EXPECT_CONTAINS(e, path + ":3:20: server.max_decode_batch: 0 is out of range (allowed: 1..1024)");
  EXPECT_CONTAINS(e, path + ":4:20: server.max_batch_tokens: 8 is out of range (allowed: >= 16)");
  EXPECT_CONTAINS(e, path + ":6:19: memory.memory_fraction: 0.0 is out of range (allowed: (0, 1])");
  EXPECT_CONTAINS(e, path + ":7:13: memory.kv_blocks: -1 is out of range (allowed: >= 0)");
}

TEST_F(ConfigLoader, BadEnumValuesListTheAllowedOnes) {
  in_.config_path = write("k.toml", "[server]\nprofile = \"fast\"\n");
  in_.env["KILN_MODEL_BACKEND"] = "metal";
  in_.flags.push_back({"logging.level", "loud", "--set logging.level"});
  const std::string e = error();
  EXPECT_CONTAINS(e, ":2:11: server.profile: 'fast' is not one of stable, experimental, maintenance");
  EXPECT_CONTAINS(e, "environment variable KILN_MODEL_BACKEND: model.backend: 'metal' is not one of auto, cpu, cuda, vulkan");
  EXPECT_CONTAINS(e, "flag --set logging.level loud: logging.level: 'loud' is not one of error, warn, info, debug");
}

TEST_F(ConfigLoader, UnparsableEnvironmentValuesNameTheVariable) {
  in_.env["KILN_SERVER_PORT"] = "80x80";
  in_.env["KILN_PREFIX_CACHE_ENABLED"] = "yes";
  const std::string e = error();
  EXPECT_CONTAINS(e, "environment variable KILN_SERVER_PORT: server.port: '80x80' is not an integer");
  EXPECT_CONTAINS(e, "environment variable KILN_PREFIX_CACHE_ENABLED: prefix_cache.enabled: 'yes' is not a bool");
}

TEST_F(ConfigLoader, UnknownVariablesOfAKnownSectionAreErrors) {
  in_.env["KILN_SERVER_PROT"] = "1";
  in_.env["KILN_PREFIX_CACHE_SIZE"] = "1";
  const std::string e = error();
  EXPECT_CONTAINS(e, "environment variable KILN_PREFIX_CACHE_SIZE: unknown key prefix_cache.size");
  EXPECT_CONTAINS(e, "environment variable KILN_SERVER_PROT: unknown key server.prot");
}

TEST_F(ConfigLoader, KilnVariablesOutsideTheSectionsAreIgnored) {
  for (const char* name : {"KILN_HOME", "KILN_CONFIG", "KILN_EVIDENCE_DIR", "KILN_CUDA_TARGET", "KILN_CUDA_SYNC",
                           "KILN_TOKENIZER_DIR", "KILN_THREADS", "KILN_SERVERX", "KILN_SERVER", "KILN_"}) {
    EXPECT_FALSE(is_config_env_var(name)) << name;
    if (std::string(name) != "KILN_CONFIG") in_.env[name] = "not a config value";
  }
  EXPECT_TRUE(is_config_env_var("KILN_SERVER_PORT"));
  EXPECT_TRUE(is_config_env_var("KILN_SERVER_NOPE"));
  EXPECT_TRUE(is_config_env_var("KILN_PREFIX_CACHE_MAX_BLOCKS"));
  ResolvedConfig r = loaded();
  for (const auto& [name, origin] : r.origins) EXPECT_EQ(origin.source, ConfigSource::kDefault) << name;
}

TEST_F(ConfigLoader, FlagProblemsNameTheFlag) {
  in_.flags = {{"server.nope", "1", ""}, {"server.port", "http", "--port"}};
  const std::string e = error();
  EXPECT_CONTAINS(e, "flag --set server.nope=1: unknown key server.nope");
  EXPECT_CONTAINS(e, "flag --port http: server.port: 'http' is not an integer");
}

TEST_F(ConfigLoader, TomlSyntaxErrorsNameTheFileAndLine) {
  const std::string path = write("k.toml", "[server]\nport = = 1\n");
  in_.config_path = path;
  const std::string e = error();
  EXPECT_CONTAINS(e, path + ":2:");
  EXPECT_CONTAINS(e, "TOML syntax error");
}

// Every problem of every level comes back in one message, file problems in file order, even where
// a higher level overrides the bad value.
TEST_F(ConfigLoader, AllProblemsAreReportedTogether) {
  const std::string path = write("k.toml", "[server]\nport = \"x\"\nprot = 1\n[memory]\nmemory_fraction = 2.0\n");
  in_.config_path = path;
  in_.env["KILN_SERVER_MAX_DECODE_BATCH"] = "many";
  in_.flags = {{"server.port", "9000", ""}, {"logging.nope", "1", ""}};
  const std::string e = error();
  EXPECT_EQ(e.rfind("invalid configuration (5 problems):\n", 0), 0u) << e;
  const size_t type = e.find(path + ":2:8: server.port: expected an integer, got a string");
  const size_t key = e.find(path + ":3:1: unknown key server.prot");
  const size_t range = e.find(path + ":5:19: memory.memory_fraction: 2.0 is out of range");
  const size_t env = e.find("environment variable KILN_SERVER_MAX_DECODE_BATCH: server.max_decode_batch: 'many' is not an integer");
  const size_t flag = e.find("flag --set logging.nope=1: unknown key logging.nope");
  for (size_t at : {type, key, range, env, flag}) EXPECT_NE(at, std::string::npos) << e;
  EXPECT_LT(type, key);
  EXPECT_LT(key, range);
  EXPECT_LT(range, env);
  EXPECT_LT(env, flag);
}

}  // namespace
}  // namespace kiln
