// The model a command uses when --model is not given: a random-weight `small` checkpoint,
// created on first use under $KILN_HOME (default ~/.cache/kiln).
#pragma once

#include <string>

#include "core/status.h"

namespace kiln::cli {

Result<std::string> resolve_model_dir(const std::string& flag);

// What `kiln serve` runs when no model is configured: a random-weight `demo` checkpoint (the
// Qwen3 tokenizer's vocabulary, small enough for a CPU) with the real Qwen3 tokenizer and chat
// template beside it, created once under $KILN_HOME. The tokenizer is copied from
// $KILN_TOKENIZER_DIR, else the source tree's .cache/tokenizers/qwen3 (scripts/fetch-tokenizer).
Result<std::string> demo_model_dir();

}  // namespace kiln::cli
