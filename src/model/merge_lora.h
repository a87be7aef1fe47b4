// A LoRA adapter folded into its base model's weights: a new checkpoint folder whose projections
// are W' = W + scale * B A, so that serving it without the adapter computes what the base model
// computes with it (up to the rounding of W' to the checkpoint's dtype).
#pragma once

#include <string>

#include "core/status.h"

namespace kiln {

// Reads the checkpoint in `model_dir` and the PEFT adapter in `adapter_dir` (checked against the
// model), and publishes `out_dir` (through a staging folder; an existing `out_dir` is refused):
// every tensor of the checkpoint under its own name, shape and dtype in one model.safetensors,
// each adapted projection merged (the sum taken in double, rounded once to the tensor's dtype),
// and every other file of `model_dir` (config.json, the tokenizer) copied as it is.
Status merge_lora_into_checkpoint(const std::string& model_dir, const std::string& adapter_dir,
                                  const std::string& out_dir);

}  // namespace kiln
