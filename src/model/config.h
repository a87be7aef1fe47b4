// The Qwen3.5 text configuration read from an HF config.json (plain, or nested under
// `text_config` in the multimodal layout), with every field the forward needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

enum class LayerKind : uint8_t { kLinearAttention, kFullAttention };

struct ModelConfig {
  std::string model_type = "qwen3_5_text";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  std::vector<LayerKind> layer_types;
  // Full attention.
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  bool attn_output_gate = true;
  double partial_rotary_factor = 0.25;
  double rope_theta = 0;
  // Gated DeltaNet.
  int64_t linear_num_key_heads = 0, linear_key_head_dim = 0;
  int64_t linear_num_value_heads = 0, linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::vector<int64_t> eos_token_ids;

  // Derived sizes.
  int64_t rotary_dim() const;
  int64_t q_proj_rows() const { return num_heads * head_dim * (attn_output_gate ? 2 : 1); }
  int64_t gdn_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int64_t gdn_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int64_t gdn_conv_dim() const { return 2 * gdn_key_dim() + gdn_value_dim(); }
  int64_t count(LayerKind kind) const;

  // `source` names the file in error messages.
  static Result<ModelConfig> from_json(const nlohmann::json& j, const std::string& source);
  static Result<ModelConfig> load(const std::string& model_dir);  // config.json (+ generation_config.json)
  nlohmann::json to_json() const;  // the HF text-model layout
  Status validate(const std::string& source) const;
};

}  // namespace kiln
