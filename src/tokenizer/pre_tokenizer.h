// The tokenizer.json "pre_tokenizer": splits normalised text into words for the model. Supports
// Split (regex or literal pattern; Removed, Isolated, MergedWithPrevious, MergedWithNext,
// Contiguous; invert), ByteLevel (with or without its own regex, add_prefix_space) and Sequence.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace kiln {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // `null` keeps the whole text as one word. ByteLevel must be the last step (it changes the
  // alphabet the model sees); other types are errors naming them.
  static Result<PreTokenizer> from_json(const nlohmann::json& config);

  // Appends the words of `text` to `words`. Words view `text` or strings appended to `owned`.
  void split(std::string_view text, std::vector<std::string_view>& words, std::deque<std::string>& owned) const;

  // True when the words are raw bytes that the model must read through the byte-level alphabet.
  bool byte_level() const { return byte_level_; }

 private:
  struct Step {
    enum class Kind { kSplit, kByteLevelPrefix } kind;
    Regex regex;  // kSplit only
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };
  static Status add_steps(const nlohmann::json& config, PreTokenizer& out, bool last);
  void apply(const Step& step, std::string_view piece, std::vector<std::string_view>& out,
             std::deque<std::string>& owned) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace kiln
