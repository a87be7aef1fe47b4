// The identity of a local model directory: every weight file's sha256 and size, and the hashes
// of config.json, tokenizer.json and the chat template. Taken before and after a run; any
// difference is identity drift and fails the run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::qualify {

struct WeightFile {
  std::string path;  // relative to the model directory
  std::string sha256;
  uint64_t bytes = 0;
};

struct ModelFingerprint {
  std::string id;  // a label (--model-id, else the directory name); not part of the identity
  std::vector<WeightFile> weight_files;  // sorted by path
  std::optional<std::string> config_hash;         // "sha256:..."; nullopt when the file is absent
  std::optional<std::string> tokenizer_hash;
  std::optional<std::string> chat_template_hash;
  std::string chat_template_source;  // which file the template came from, or "" when none

  // Identity: everything except the label.
  bool same_identity(const ModelFingerprint& other) const;
};

// Hashes `*.safetensors` (and the sharded index) at the top of `dir`, config.json,
// tokenizer.json, and the chat template from chat_template.jinja or else the "chat_template"
// string of tokenizer_config.json. A directory without weight files is an error.
Result<ModelFingerprint> fingerprint_model(const std::string& dir, const std::string& id);

}  // namespace kiln::qualify
