// The model a command uses when --model is not given: a random-weight `small` checkpoint,
// created on first use under $KILN_HOME (default ~/.cache/kiln).
#pragma once

#include <string>

#include "config/kiln_config.h"
#include "core/status.h"

namespace kiln::cli {

// `flag` (a folder, or a Hub name ORG/NAME[@REVISION] resolved through the Hugging Face cache and
// fetched when missing: hub/resolve.h), else the random-weight 'small' checkpoint.
Result<std::string> resolve_model_dir(const std::string& flag);

// model.path of a configuration made into a folder (a Hub name resolved as above); a name also
// becomes the served model id when none is configured. An empty path stays empty.
Status resolve_configured_model(KilnConfig& config);

// What `kiln serve` runs when no model is configured: a random-weight `demo` checkpoint (the
// Qwen3 tokenizer's vocabulary, small enough for a CPU) with the real Qwen3 tokenizer and chat
// template beside it, created once under $KILN_HOME. The tokenizer is copied from
// $KILN_TOKENIZER_DIR, else the source tree's .cache/tokenizers/qwen3 (scripts/fetch-tokenizer).
Result<std::string> demo_model_dir();

}  // namespace kiln::cli
