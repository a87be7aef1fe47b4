// Which files of a Hugging Face checkpoint folder Kiln serves from, and whether a folder can be
// served: the names a Hub pull fetches, and the check behind `kiln model list` and name
// resolution (config.json's architecture and text config, the tokenizer, every weight shard).
#pragma once

#include <string>
#include <vector>

namespace kiln {

// Top-level files serving reads besides the weights: config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja,
// chat_template.json.
bool is_serving_metadata_file(const std::string& name);
// The metadata files serving reads when present and does without otherwise (defaults, the
// tokenizer's own template): generation_config.json, tokenizer_config.json,
// special_tokens_map.json, chat_template.jinja, chat_template.json.
const std::vector<std::string>& optional_serving_files();
inline constexpr const char* kSafetensorsIndex = "model.safetensors.index.json";
inline constexpr const char* kSingleSafetensors = "model.safetensors";

// The architectures of config.json Kiln runs (the dense Qwen3.5 models, text part).
bool is_servable_architecture(const std::string& architecture);

struct ServableCheck {
  bool servable = false;
  std::string architecture;           // config.json's architectures[0], "" when unknown
  std::vector<std::string> missing;   // required files absent (shards named by the index included)
  std::string problem;                // why not, in one line ("" when servable)
};

// Reads config.json and the safetensors index (not the weights).
ServableCheck check_servable(const std::string& dir);

}  // namespace kiln
