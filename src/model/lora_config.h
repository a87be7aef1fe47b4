// LoRA adapter settings as HF PEFT's adapter_config.json holds them, and the ten projections of
// Qwen3.5 an adapter may target (docs/training.md, "The adapter": attention q/k/v/o, GDN
// in_proj_qkv, in_proj_z, out_proj, MLP gate/up/down).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config.h"

namespace kiln {

enum class LoraTarget : uint8_t {
  kQProj, kKProj, kVProj, kOProj,  // full attention, `self_attn.`
  kInProjQkv, kInProjZ, kOutProj,  // Gated DeltaNet, `linear_attn.`
  kGateProj, kUpProj, kDownProj,   // MLP, `mlp.`
};
inline constexpr int kLoraTargetCount = 10;

std::string_view lora_target_name(LoraTarget t);    // "q_proj", as PEFT's target_modules spells it
std::string_view lora_target_parent(LoraTarget t);  // "self_attn", "linear_attn" or "mlp"
std::optional<LoraTarget> parse_lora_target(std::string_view name);
bool lora_target_in_layer(LoraTarget t, LayerKind kind);  // whether a layer of `kind` has the projection

struct LoraDims {
  int64_t in = 0, out = 0;  // the projection's weight is [out, in]; A is [r, in], B [out, r]
};
LoraDims lora_target_dims(const ModelConfig& c, LoraTarget t);

struct LoraConfig {
  int64_t rank = 16;                 // r
  double alpha = 32;                 // lora_alpha
  bool use_rslora = false;           // scale alpha / sqrt(r) instead of alpha / r
  std::vector<LoraTarget> targets;   // target_modules: distinct, in enum order
  std::vector<int64_t> layers;       // layers_to_transform; empty: every layer
  std::string base_model;            // base_model_name_or_path ("" for null)
  double dropout = 0;                // lora_dropout: for training; inference ignores it

  float scale() const;
  bool has_target(LoraTarget t) const;
  bool has_layer(int64_t layer) const;  // layers_to_transform admits it

  // Every key Kiln cannot honour (DoRA, biases, modules_to_save, rank/alpha patterns, regex
  // targets, ...) is an error naming the key; keys newer PEFT versions add are ignored.
  static Result<LoraConfig> from_json(const nlohmann::json& j, const std::string& source);
  static Result<LoraConfig> load(const std::string& adapter_dir);  // <dir>/adapter_config.json
  nlohmann::json to_json() const;  // PEFT's layout: PEFT's LoraConfig.from_pretrained reads it
  Status validate(const std::string& source) const;
};

}  // namespace kiln
