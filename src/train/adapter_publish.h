// Atomic publication of adapter directories under model.adapter_dir (spec/api.md "Adapters"):
// everything is written into a staging directory inside adapter_dir, validated by reading it
// back as an adapter of the served model (HostLoraAdapter::read: every file and tensor checked,
// no device involved), then renamed to <adapter_dir>/<name>. An adapter of
// that name already there is swapped out in one step and removed. On any failure nothing is
// published and the staging directory is gone. Training jobs, uploads and merges all land this way.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config.h"
#include "model/host_lora_adapter.h"

namespace kiln {

inline constexpr const char* kTrainReceiptFile = "train_receipt.json";

// A new, empty staging directory inside `adapter_dir` (created if missing) for adapter `name`.
// Its name starts with ".staging-" so that it is never mistaken for an adapter.
Result<std::string> make_staging_dir(const std::string& adapter_dir, const std::string& name);

// Validates `staged` (HostLoraAdapter::read against `model`) and moves it to <adapter_dir>/<name>;
// returns that path. `staged` is removed whatever happens.
Result<std::string> publish_staged(const std::string& staged, const ModelConfig& model, const std::string& adapter_dir,
                                   const std::string& name);

// Writes `adapter` (PEFT layout; a device adapter's LoraAdapter::download) and, unless null,
// `receipt` as train_receipt.json into a staging directory, then publish_staged. Returns the
// published path.
Result<std::string> publish_adapter(const HostLoraAdapter& adapter, const nlohmann::json& receipt,
                                    const ModelConfig& model, const std::string& adapter_dir, const std::string& name);

}  // namespace kiln
