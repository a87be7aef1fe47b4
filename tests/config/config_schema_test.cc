// The schema table: exactly KilnConfig's fields, defaults read from the struct, each row wired to
// its own member, and the constraints of docs/configuration.md ("Reference").
#include <gtest/gtest.h>

#include <set>

#include "config/config_schema.h"

namespace kiln {
namespace {

const ConfigField& field(std::string_view name) {
  const ConfigField* f = find_config_field(name);
  EXPECT_NE(f, nullptr) << name;
  return *f;
}

TEST(ConfigSchema, ListsEveryFieldOfKilnConfigInOrder) {
  const std::vector<std::string> expected = {
      "server.host", "server.port", "server.max_batch_tokens", "server.max_decode_batch",
      "server.max_queued_requests", "server.request_timeout_secs", "server.max_body_bytes", "server.max_adapter_bytes",
      "server.http_threads",
      "server.profile", "server.api_key", "server.api_key_file", "server.metrics_public", "server.allowed_hosts",
      "server.allowed_origins", "server.state_dir", "server.max_loaded_adapters", "server.max_adapter_memory_bytes",
      "model.path", "model.served_model_id", "model.adapter_dir", "model.tokenizer_path",
      "model.backend", "model.max_context", "memory.kv_blocks", "memory.memory_fraction", "memory.kv_cache_fp8",
      "batching.channel_capacity", "prefix_cache.enabled", "prefix_cache.max_blocks", "prefix_cache.max_bytes",
      "training.webhook_url", "training.reward_url", "training.reward_timeout_seconds", "training.reward_retries",
      "training.teacher_url", "training.teacher_model", "training.teacher_api_key", "training.teacher_timeout_seconds",
      "training.teacher_retries", "training.max_queued_jobs", "training.checkpoint_interval",
      "training.checkpoint_keep", "training.trace_memory_fraction", "training.reserve_sequences",
      "training.reserve_sequence_tokens", "training.reserve_lora_rank", "training.data_dir", "training.max_dataset_bytes", "training.max_job_tokens",
      "training.max_job_seconds", "logging.level", "logging.request_log", "logging.request_log_dir",
      "logging.request_log_max_bytes", "logging.request_log_redact", "vulkan.device", "vulkan.validation"};
  std::vector<std::string> names;
  for (const ConfigField& f : config_schema()) names.push_back(f.name());
  EXPECT_EQ(names, expected);
  EXPECT_EQ(config_sections(),
            (std::vector<std::string_view>{"server", "model", "memory", "batching", "prefix_cache", "training", "logging",
                                            "vulkan"}));
  for (const ConfigField& f : config_schema()) EXPECT_FALSE(f.help.empty()) << f.name();
}

TEST(ConfigSchema, DefaultsComeFromADefaultConstructedKilnConfig) {
  EXPECT_EQ(std::get<int64_t>(field("server.port").default_value()), 8420);
  EXPECT_EQ(std::get<int64_t>(field("server.max_batch_tokens").default_value()), 512);
  EXPECT_EQ(std::get<int64_t>(field("server.max_body_bytes").default_value()), 8 << 20);
  EXPECT_EQ(std::get<int64_t>(field("server.max_adapter_bytes").default_value()), int64_t{512} << 20);
  EXPECT_EQ(std::get<int64_t>(field("training.checkpoint_keep").default_value()), 3);
  EXPECT_EQ(std::get<std::string>(field("server.host").default_value()), "127.0.0.1");
  EXPECT_EQ(std::get<std::string>(field("server.profile").default_value()), "stable");
  EXPECT_EQ(std::get<std::string>(field("model.backend").default_value()), "auto");
  EXPECT_EQ(std::get<std::string>(field("model.path").default_value()), "");
  EXPECT_DOUBLE_EQ(std::get<double>(field("memory.memory_fraction").default_value()), 0.9);
  EXPECT_FALSE(std::get<bool>(field("memory.kv_cache_fp8").default_value()));
  EXPECT_TRUE(std::get<bool>(field("prefix_cache.enabled").default_value()));
  EXPECT_EQ(std::get<int64_t>(field("prefix_cache.max_bytes").default_value()), int64_t{1} << 32);
  EXPECT_EQ(std::get<std::string>(field("logging.level").default_value()), "info");
}

// Writing one row through its setter changes that row's getter and no other row's.
TEST(ConfigSchema, EveryRowWritesItsOwnMember) {
  const auto& schema = config_schema();
  for (size_t i = 0; i < schema.size(); ++i) {
    KilnConfig c;
    ConfigValue changed = std::visit(
        [](const auto& v) -> ConfigValue {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) return !v;
          else if constexpr (std::is_same_v<T, std::string>) return v + "-changed";
          else return v + 7;
        },
        schema[i].default_value());
    schema[i].set(c, changed);
    EXPECT_EQ(schema[i].get(c), changed) << schema[i].name();
    for (size_t j = 0; j < schema.size(); ++j) {
      if (j != i) {
        EXPECT_EQ(schema[j].get(c), schema[j].default_value()) << schema[i].name() << " wrote " << schema[j].name();
      }
    }
  }
}

TEST(ConfigSchema, TypesAndConstraintsFollowTheSpec) {
  const std::vector<std::tuple<const char*, FieldType, const char*>> cases = {
      {"server.host", FieldType::kString, ""},
      {"server.port", FieldType::kInteger, "0..65535"},
      {"server.max_batch_tokens", FieldType::kInteger, ">= 16"},
      {"server.max_decode_batch", FieldType::kInteger, "1..1024"},
      {"server.max_queued_requests", FieldType::kInteger, ">= 1"},
      {"server.request_timeout_secs", FieldType::kInteger, ">= 1"},
      {"server.max_body_bytes", FieldType::kInteger, ">= 1024"},
      {"server.max_adapter_bytes", FieldType::kInteger, ">= 1024"},
      {"training.checkpoint_keep", FieldType::kInteger, ">= 0"},
      {"server.profile", FieldType::kEnum, "stable | experimental | maintenance"},
      {"model.backend", FieldType::kEnum, "auto | cpu | cuda | vulkan"},
      {"memory.kv_blocks", FieldType::kInteger, ">= 0"},
      {"memory.memory_fraction", FieldType::kFloat, "(0, 1]"},
      {"memory.kv_cache_fp8", FieldType::kBool, ""},
      {"logging.level", FieldType::kEnum, "error | warn | info | debug"},
  };
  for (const auto& [name, type, constraint] : cases) {
    EXPECT_EQ(field(name).type, type) << name;
    EXPECT_EQ(field(name).constraint(), constraint) << name;
  }
}

TEST(ConfigSchema, CheckRefusesOutOfRangeAndNonEnumValues) {
  EXPECT_TRUE(field("server.port").check(int64_t{0}).ok());
  EXPECT_TRUE(field("server.port").check(int64_t{65535}).ok());
  EXPECT_EQ(field("server.port").check(int64_t{65536}).message(), "65536 is out of range (allowed: 0..65535)");
  EXPECT_EQ(field("server.port").check(int64_t{-1}).message(), "-1 is out of range (allowed: 0..65535)");
  EXPECT_EQ(field("server.max_batch_tokens").check(int64_t{15}).message(), "15 is out of range (allowed: >= 16)");
  EXPECT_FALSE(field("memory.memory_fraction").check(0.0).ok());
  EXPECT_TRUE(field("memory.memory_fraction").check(1.0).ok());
  EXPECT_EQ(field("memory.memory_fraction").check(1.5).message(), "1.5 is out of range (allowed: (0, 1])");
  EXPECT_EQ(field("server.profile").check(std::string("fast")).message(),
            "'fast' is not one of stable, experimental, maintenance");
  EXPECT_TRUE(field("model.backend").check(std::string("cuda")).ok());
  for (const ConfigField& f : config_schema()) EXPECT_TRUE(f.check(f.default_value()).ok()) << f.name();
}

TEST(ConfigSchema, EnvironmentNamesAreUpperCaseSectionAndKey) {
  EXPECT_EQ(field("server.port").env_var(), "KILN_SERVER_PORT");
  EXPECT_EQ(field("prefix_cache.max_blocks").env_var(), "KILN_PREFIX_CACHE_MAX_BLOCKS");
  std::set<std::string> names;
  for (const ConfigField& f : config_schema()) EXPECT_TRUE(names.insert(f.env_var()).second) << f.env_var();
}

TEST(ConfigSchema, FindsOnlyWholeDottedNames) {
  EXPECT_NE(find_config_field("prefix_cache.enabled"), nullptr);
  EXPECT_EQ(find_config_field("server.nope"), nullptr);
  EXPECT_EQ(find_config_field("server"), nullptr);
  EXPECT_EQ(find_config_field("server.port.x"), nullptr);
  EXPECT_EQ(find_config_field("serverXport"), nullptr);
}

}  // namespace
}  // namespace kiln
