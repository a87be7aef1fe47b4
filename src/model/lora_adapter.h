// A LoRA adapter in memory: per layer and target projection the factors A [r, in] and B [out, r]
// on the model's backend, with its LoraConfig; loaded from and saved to HF PEFT's file layout
// (adapter_config.json + adapter_model.safetensors, tensors
// `base_model.model.model[.language_model].layers.{i}.{self_attn|linear_attn|mlp}.{module}.lora_{A|B}.weight`).
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/facets.h"
#include "model/config.h"
#include "model/lora_config.h"

namespace kiln {

struct LoraFactors {
  Tensor a;  // [r, in]: f32, bf16 or f16 (as the file holds it); contiguous
  Tensor b;  // [out, r]
  bool defined() const { return a.defined(); }
};

// Held through shared pointers where it serves (engine/adapter_registry.h): weak_from_this() lets
// a decode replay (model/decode_replay.h) keep the adapters its recordings read.
class LoraAdapter : public std::enable_shared_from_this<LoraAdapter> {
 public:
  static constexpr const char* kFlatPrefix = "base_model.model.model.";
  static constexpr const char* kNestedPrefix = "base_model.model.model.language_model.";

  // Reads `dir` (PEFT layout) and checks every tensor against `model` (names, shapes, A/B pairs,
  // nothing unknown, nothing missing) before any reaches the device. Factors keep the file's dtype.
  static Result<LoraAdapter> load(const std::string& dir, const ModelConfig& model, StorageFacet& storage);
  // A fresh adapter as training starts one (spec/training.md): A uniform in +-sqrt(1/in) drawn
  // from `seed`, B zero, so it changes nothing; f32.
  static Result<LoraAdapter> init(const LoraConfig& config, const ModelConfig& model, uint64_t seed,
                                  StorageFacet& storage);
  // An adapter of the same config, prefix and factor shapes whose factors are f32 zeros: the
  // gradients of `like` (train/lora_trainer.cc).
  static Result<LoraAdapter> zeros_like(const LoraAdapter& like, StorageFacet& storage);

  // Writes adapter_config.json and adapter_model.safetensors (streamed, factor by factor, with
  // PEFT's names) into `dir`, created if missing; each file goes through a temporary name and a
  // rename, so a reader never sees half a file. Publishing a whole directory atomically is the caller's.
  Status save(const std::string& dir, StorageFacet& storage) const;

  const LoraConfig& config() const { return config_; }
  int64_t bytes() const;  // of every factor, on its backend
  float scale() const { return config_.scale(); }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // The factors of one projection; undefined where the adapter has none (layer kind, targets).
  const LoraFactors& factors(int64_t layer, LoraTarget t) const { return layers_[layer][static_cast<int>(t)]; }
  LoraFactors& factors(int64_t layer, LoraTarget t) { return layers_[layer][static_cast<int>(t)]; }
  // The tensor-name prefix save() writes: kNestedPrefix for an adapter of the multimodal checkpoint.
  const std::string& tensor_prefix() const { return prefix_; }
  void set_tensor_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  // PEFT's name of one factor ("...layers.3.self_attn.q_proj.lora_A.weight").
  std::string tensor_name(int64_t layer, LoraTarget t, bool b) const;

 private:
  LoraConfig config_;
  std::string prefix_ = kFlatPrefix;
  std::vector<std::array<LoraFactors, kLoraTargetCount>> layers_;
};

// One adapter of a row's stack (the API's `adapters: [{name, scale}]`): its delta, already
// scaled by lora_alpha / r, is added `weight` times. The adapter must outlive the forward.
struct LoraTerm {
  const LoraAdapter* adapter = nullptr;
  float weight = 1.f;
  bool operator==(const LoraTerm&) const = default;
  auto operator<=>(const LoraTerm&) const = default;  // orders replay recordings by composition
};

}  // namespace kiln
