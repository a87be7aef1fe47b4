// Streaming decode: feed token ids one at a time and get text that never ends inside a UTF-8
// sequence; the concatenation of everything emitted plus finish() equals Tokenizer::decode of
// all the ids.
#pragma once

#include <string>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace kiln {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, SpecialTokenOutput special = SpecialTokenOutput::kKeep)
      : tokenizer_(&tokenizer), special_(special) {}

  // Adds one token; returns the text that became final (possibly empty: an incomplete character
  // is held back until its last byte arrives or it can no longer complete).
  Result<std::string> push(TokenId id);
  // What finish() would return now, without consuming it.
  std::string pending_text() const;
  // Returns the held-back bytes (as U+FFFD where they are not UTF-8) and resets.
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  SpecialTokenOutput special_;
  std::string pending_;  // bytes not yet emitted: at most an incomplete UTF-8 sequence
  bool first_ = true;
};

}  // namespace kiln
