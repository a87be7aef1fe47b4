// Publication of adapter folders under model.adapter_dir (docs/serving.md): everything is
// written into a staging folder inside adapter_dir, validated by reading it back as an adapter of
// the served model (HostLoraAdapter::read: every file and tensor checked, no device involved), then
// put in place by core/atomic_publish (one rename; an adapter of that name already there is
// exchanged out and deleted). On failure nothing is published; a training job's adapter is then
// kept as <adapter_dir>/.failed-<name>-<random> where its files were written whole. Training jobs,
// checkpoints, uploads and merges all land this way.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/atomic_publish.h"
#include "core/status.h"
#include "model/config.h"
#include "model/host_lora_adapter.h"

namespace kiln {

inline constexpr const char* kTrainReceiptFile = "train_receipt.json";

// A staging folder for adapter `name` (a valid adapter name) inside `adapter_dir` (created if
// missing).
Result<StagedFolder> stage_adapter(const std::string& adapter_dir, const std::string& name);

// Validates `staged` (HostLoraAdapter::read against `model`) and publishes it; returns its path.
Result<std::string> publish_staged(StagedFolder& staged, const ModelConfig& model, PublishMode mode);

enum class OnPublishFailure {
  kDiscard,  // the staging folder is removed
  kKeep,     // written whole, it is kept (StagedFolder::keep) and the error says where
};

// Writes `adapter` (PEFT layout; a device adapter's LoraAdapter::download) and, unless null,
// `receipt` as train_receipt.json into a staging folder, then publish_staged, replacing an adapter
// of that name. Returns the published path.
Result<std::string> publish_adapter(const HostLoraAdapter& adapter, const nlohmann::json& receipt,
                                    const ModelConfig& model, const std::string& adapter_dir, const std::string& name,
                                    OnPublishFailure on_failure = OnPublishFailure::kDiscard);

}  // namespace kiln
