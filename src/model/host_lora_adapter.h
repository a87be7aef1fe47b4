// HostLoraAdapter: a LoRA adapter's factors in host memory and HF PEFT's file layout around them
// (adapter_config.json + adapter_model.safetensors): read and checked against a model, made
// fresh for training, written back. No device is involved, so a server does all of it on the
// caller's thread and only the copy to or from the device (model/lora_adapter.h) on the engine's.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/lora_config.h"

namespace kiln {

struct LoraFactors {
  Tensor a;  // [r, in]: f32, bf16 or f16 (as the file holds it); contiguous
  Tensor b;  // [out, r]
  bool defined() const { return a.defined(); }
};

// PEFT's name of one factor under `prefix` ("...layers.3.self_attn.q_proj.lora_A.weight").
std::string lora_tensor_name(const std::string& prefix, int64_t layer, LoraTarget t, bool b);

struct HostLoraAdapter {
  static constexpr const char* kFlatPrefix = "base_model.model.model.";
  static constexpr const char* kNestedPrefix = "base_model.model.model.language_model.";

  // Reads `dir` (PEFT layout) and checks every tensor against `model`: names, shapes, A/B pairs,
  // dtypes, nothing unknown, nothing missing. The factors keep the file's dtype and are views of
  // the mapped file (a writer replaces files by renaming, so the mapping stays what was read).
  static Result<HostLoraAdapter> read(const std::string& dir, const ModelConfig& model);
  // A fresh adapter as training starts one (docs/training.md): A uniform in +-sqrt(1/in) drawn
  // from `seed`, B zero, so it changes nothing; f32.
  static Result<HostLoraAdapter> init(const LoraConfig& config, const ModelConfig& model, uint64_t seed);

  // Writes adapter_config.json and adapter_model.safetensors (streamed, factor by factor, with
  // PEFT's names) into `dir`, created if missing; each file goes through a temporary name and a
  // rename, so a reader never sees half a file. Publishing a whole directory atomically is the caller's.
  Status write(const std::string& dir) const;

  int64_t num_layers() const { return static_cast<int64_t>(layers.size()); }
  const LoraFactors& factors(int64_t layer, LoraTarget t) const { return layers[layer][static_cast<int>(t)]; }
  LoraFactors& factors(int64_t layer, LoraTarget t) { return layers[layer][static_cast<int>(t)]; }
  std::string tensor_name(int64_t layer, LoraTarget t, bool b) const { return lora_tensor_name(prefix, layer, t, b); }

  LoraConfig config;
  std::string prefix = kFlatPrefix;  // kNestedPrefix for an adapter of the multimodal checkpoint
  std::vector<std::array<LoraFactors, kLoraTargetCount>> layers;  // undefined where not adapted
};

}  // namespace kiln
