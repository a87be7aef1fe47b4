// The tiny-chat preset (random weights, Qwen3 vocabulary) with the Qwen3 tokenizer beside it,
// written once per test binary: a model the commands under test can serve and tokenize for.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "model/init.h"
#include "test_util.h"

namespace kiln::testing {

inline const std::string& chat_model() {
  static const std::string dir = [] {
    const std::string d = temp_dir("cli-chat-model");
    InitOptions o;
    o.quiet = true;
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), d, o).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(std::string(KILN_SOURCE_DIR) + "/.cache/tokenizers/qwen3/" + f, d + "/" + f);
    return d;
  }();
  return dir;
}

}  // namespace kiln::testing
