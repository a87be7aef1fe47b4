// Where the real Qwen3 tokenizer lies for tests and fuzz targets: $KILN_TOKENIZER_DIR, else
// .cache/tokenizers/qwen3 in the source tree (scripts/fetch-tokenizer puts it there).
#pragma once

#include <cstdlib>
#include <string>

namespace kiln::testing {

inline std::string qwen3_dir() {
  if (const char* dir = std::getenv("KILN_TOKENIZER_DIR")) return dir;
  return std::string(KILN_SOURCE_DIR) + "/.cache/tokenizers/qwen3";
}

}  // namespace kiln::testing
