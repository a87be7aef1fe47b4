// A LoRA adapter on the model's backend: per layer and target projection the factors A [r, in] and
// B [out, r] on the device, with its LoraConfig. The files (HF PEFT's layout, tensors
// `base_model.model.model[.language_model].layers.{i}.{self_attn|linear_attn|mlp}.{module}.lora_{A|B}.weight`)
// are read and written by HostLoraAdapter; upload and download are the only device work between them.
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
#include "model/host_lora_adapter.h"
#include "model/lora_config.h"

namespace kiln {

// Held through shared pointers where it serves (engine/adapter_registry.h): weak_from_this() lets
// a decode replay (model/decode_replay.h) keep the adapters its recordings read.
class LoraAdapter : public std::enable_shared_from_this<LoraAdapter> {
 public:
  static constexpr const char* kFlatPrefix = HostLoraAdapter::kFlatPrefix;
  static constexpr const char* kNestedPrefix = HostLoraAdapter::kNestedPrefix;

  // The device part of a load: `host`'s factors copied onto the device (never aliasing the host
  // tensors: those of a read adapter map its file, which may be trained or saved over).
  static Result<LoraAdapter> upload(const HostLoraAdapter& host, StorageFacet& storage);
  // The device part of a save: the factors copied to the host.
  Result<HostLoraAdapter> download(StorageFacet& storage) const;
  // HostLoraAdapter::read, then upload: for callers that own the device (tools, tests).
  static Result<LoraAdapter> load(const std::string& dir, const ModelConfig& model, StorageFacet& storage);
  // HostLoraAdapter::init, then upload.
  static Result<LoraAdapter> init(const LoraConfig& config, const ModelConfig& model, uint64_t seed,
                                  StorageFacet& storage);
  // An adapter of the same config, prefix and factor shapes whose factors are f32 zeros: the
  // gradients of `like` (train/lora_trainer.cc).
  static Result<LoraAdapter> zeros_like(const LoraAdapter& like, StorageFacet& storage);
  // download, then HostLoraAdapter::write: for callers that own the device (tools, tests).
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
  std::string tensor_name(int64_t layer, LoraTarget t, bool b) const { return lora_tensor_name(prefix_, layer, t, b); }

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
