// The `peer` field of a bench document: the JSON a peer run wrote (tools/bench_hf_peer.py: HF
// transformers, or transformers + PEFT for training, on the same checkpoint and GPU), included
// as it is so that the figures sit side by side in one file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln::cli {

// Reads `path` (the value of --peer-json); the error names the flag and the file.
Result<nlohmann::json> read_peer_json(const std::string& path);

}  // namespace kiln::cli
