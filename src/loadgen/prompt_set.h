// A fixed set of chat prompts for the serving load generator, read from JSONL: one object per
// line, {"id": string, "messages": [OpenAI chat messages], "max_tokens"?: positive integer}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln::loadgen {

struct Prompt {
  std::string id;
  nlohmann::json messages;             // a non-empty array of {"role", ...} objects, sent as is
  std::optional<int64_t> max_tokens;   // replaces the run's max_tokens for this prompt
};

struct PromptSet {
  std::string name;  // the file name without directory and extension ("serving-v1")
  std::vector<Prompt> prompts;
};

// Parses JSONL text; blank lines are skipped. Errors name `source`, the 1-based line and the
// field at fault. Ids must be unique; unknown keys are refused (they are usually typos).
Result<PromptSet> parse_prompt_set(std::string_view text, const std::string& source);

// Reads and parses a file; the set's name is the file's stem.
Result<PromptSet> load_prompt_set(const std::string& path);

}  // namespace kiln::loadgen
