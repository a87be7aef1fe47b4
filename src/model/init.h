// `kiln model init`: random-weight checkpoints of named shapes, written in the HF layout
// (config.json + model.safetensors) by streaming, so the 4B shape never sits in memory whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"

namespace kiln {

// "tiny" (tests), "small" (~100M parameters: CPU demos and benchmarks), "qwen3.5-4b" (the exact
// 4B shape: GPU benchmarks).
Result<ModelConfig> preset_config(const std::string& name);
std::vector<std::string> preset_names();

struct InitOptions {
  uint64_t seed = 0;
  DType dtype = DType::kBF16;  // of the projections and embeddings; norms etc. follow it too
  bool quiet = false;          // no progress lines on stderr
};

Status write_random_checkpoint(const ModelConfig& config, const std::string& out_dir, const InitOptions& opts);

}  // namespace kiln
