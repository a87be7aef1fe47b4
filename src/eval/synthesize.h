// An SFT dataset to an eval suite (docs/evals.md "Synthesize"): each conversation's final
// assistant turn becomes the expected answer and the messages before it the prompt; a seeded
// held-out split keeps round(fraction x N) of them, recorded in the manifest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/suite.h"

namespace kiln {

struct SynthesizeSpec {
  std::string name;
  double holdout_fraction = 0;  // 0: every example, no split
  uint64_t seed = 0;
  nlohmann::json scorer;        // null: auto-detection
  int64_t max_tokens = 64;
  nlohmann::json chat_template_kwargs = {{"enable_thinking", false}};
};

// `examples` is [{messages}, ...] as POST /v1/train/sft takes it; `path` names it in errors.
std::optional<FieldError> synthesize_suite(const SynthesizeSpec& spec, const nlohmann::json& examples,
                                           const std::string& path, EvalSuite& out);

// The held-out source indices: the first round(fraction x n) of a seeded shuffle, ascending.
std::vector<int64_t> holdout_indices(int64_t n, double fraction, uint64_t seed);

}  // namespace kiln
