// The renderings of a resolved configuration (JSON, text) and the Markdown reference, which
// docs/configuration.md must carry verbatim.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config/config_loader.h"
#include "config/config_reference.h"
#include "config/config_render.h"
#include "config/config_schema.h"

namespace kiln {
namespace {

ResolvedConfig with_flags(std::vector<FlagOverride> flags, std::map<std::string, std::string> env = {}) {
  ConfigInputs in;
  in.default_file = "";
  in.flags = std::move(flags);
  in.env = std::move(env);
  return load_config(in).value();
}

TEST(ConfigRender, JsonHasEverySectionAndFieldWithValueAndSource) {
  nlohmann::json j = config_to_json(with_flags({}));
  EXPECT_EQ(j["server"]["port"], nlohmann::json({{"value", 8420}, {"source", "default"}}));
  EXPECT_EQ(j["server"]["host"], nlohmann::json({{"value", "127.0.0.1"}, {"source", "default"}}));
  EXPECT_TRUE(j["memory"]["memory_fraction"]["value"].is_number_float());
  EXPECT_DOUBLE_EQ(j["memory"]["memory_fraction"]["value"].get<double>(), 0.9);
  EXPECT_TRUE(j["prefix_cache"]["enabled"]["value"].is_boolean());
  EXPECT_TRUE(j["prefix_cache"]["max_bytes"]["value"].is_number_integer());
  size_t fields = 0;
  for (auto& [section, entries] : j.items()) {
    for (auto& [key, entry] : entries.items()) {
      ++fields;
      EXPECT_NE(find_config_field(section + "." + key), nullptr) << section << "." << key;
      EXPECT_EQ(entry.size(), 2u) << entry.dump();
    }
  }
  EXPECT_EQ(j.size(), 8u);
  EXPECT_EQ(fields, config_schema().size());
}

TEST(ConfigRender, JsonNamesWhereANonDefaultValueCameFrom) {
  nlohmann::json j = config_to_json(with_flags({{"server.port", "9000", "--port"}}, {{"KILN_LOGGING_LEVEL", "debug"}}));
  EXPECT_EQ(j["server"]["port"], nlohmann::json({{"value", 9000}, {"source", "flag"}, {"flag", "--port"}}));
  EXPECT_EQ(j["logging"]["level"], nlohmann::json({{"value", "debug"}, {"source", "env"}, {"env", "KILN_LOGGING_LEVEL"}}));
  ResolvedConfig r = with_flags({});
  r.origins["model.path"] = {ConfigSource::kFile, "/etc/kiln.toml"};
  EXPECT_EQ(config_to_json(r)["model"]["path"],
            nlohmann::json({{"value", ""}, {"source", "file"}, {"file", "/etc/kiln.toml"}}));
}

TEST(ConfigRender, TextIsOneLinePerFieldWithItsSource) {
  const std::string text = config_to_text(with_flags({{"server.port", "9000", ""}}));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), static_cast<long>(config_schema().size()));
  EXPECT_EQ(text.rfind("server.host = \"127.0.0.1\"  (default)\nserver.port = 9000  (flag --set server.port)\n", 0), 0u)
      << text;
  EXPECT_NE(text.find("\nmemory.memory_fraction = 0.9  (default)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nprefix_cache.enabled = true  (default)\n"), std::string::npos) << text;
}

TEST(ConfigRender, TheApiKeyShowsWhetherItIsSetNeverItsValue) {
  const ResolvedConfig r = with_flags({{"server.api_key", "s3cret-key", "--api-key"}});
  const nlohmann::json j = config_to_json(r);
  EXPECT_EQ(j["server"]["api_key"], nlohmann::json({{"value", "<set>"}, {"source", "flag"}, {"flag", "--api-key"}}));
  const std::string text = config_to_text(r);
  EXPECT_NE(text.find("server.api_key = \"<set>\"  (flag --api-key)\n"), std::string::npos) << text;
  EXPECT_EQ(j.dump().find("s3cret"), std::string::npos);
  EXPECT_EQ(text.find("s3cret"), std::string::npos);
  EXPECT_EQ(config_to_json(with_flags({}))["server"]["api_key"]["value"], "");
  EXPECT_EQ(r.config.server.api_key, "s3cret-key");  // the server still gets it
}

// The remote teacher's key, from the environment as from a flag, is as hidden as the API key.
TEST(ConfigRender, TheTeacherKeyFromTheEnvironmentShowsOnlyThatItIsSet) {
  const ResolvedConfig r = with_flags({}, {{"KILN_TRAINING_TEACHER_API_KEY", "sk-t3acher"}});
  const nlohmann::json j = config_to_json(r);
  EXPECT_EQ(j["training"]["teacher_api_key"]["value"], "<set>") << j["training"].dump();
  EXPECT_EQ(j.dump().find("t3acher"), std::string::npos);
  EXPECT_EQ(config_to_text(r).find("t3acher"), std::string::npos);
  EXPECT_EQ(r.config.training.teacher_api_key, "sk-t3acher");
}

TEST(ConfigReference, MarkdownHasARowPerKey) {
  const std::string md = config_reference_markdown();
  EXPECT_NE(md.find("### [prefix_cache]\n"), std::string::npos);
  EXPECT_NE(md.find("| `server.port` | integer | `8420` | `0..65535` | `KILN_SERVER_PORT` | "), std::string::npos) << md;
  EXPECT_NE(md.find("| `server.profile` | enum | `\"stable\"` | `stable \\| experimental \\| maintenance` | "), std::string::npos)
      << md;
  for (const ConfigField& f : config_schema()) EXPECT_NE(md.find("| `" + f.name() + "` |"), std::string::npos) << f.name();
}

// docs/configuration.md carries `kiln config --markdown` verbatim; regenerate it when the schema changes.
TEST(ConfigReference, CheckedInDocumentationIsFresh) {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(config_reference_markdown()), std::string::npos)
      << "docs/configuration.md is stale: paste the output of `kiln config --markdown` into it";
}

}  // namespace
}  // namespace kiln
