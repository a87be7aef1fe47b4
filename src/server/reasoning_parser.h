// ReasoningParser: splits a choice's generated text into reasoning (Qwen's <think> ... </think>
// span) and content, streaming; and prompt_opens_reasoning, which says whether a rendered chat
// prompt leaves a <think> open so that generation starts inside the reasoning span.
//
// Recognised: a <think> that is the first non-whitespace of the output (only when generation
// does not start inside the span), and the first </think> after the span opened. Any later tag is
// ordinary text. Trimmed (ASCII space, \t, \n, \r): whitespace before the opening <think>,
// at both edges of the reasoning, and at the start of the content after </think>. Without a span
// the content is the text verbatim; a span still open at the end is all reasoning.
#pragma once

#include <string>
#include <string_view>

#include "server/text_holdback.h"

namespace kiln {

enum class ReasoningStart {
  kOutside,  // the prompt did not open a span: the output may begin with <think>
  kInside,   // the prompt ends with an open <think>: the output is reasoning until </think>
};

// True when `rendered_prompt`, ignoring trailing whitespace, ends with "<think>" (Qwen3.5 with
// thinking on ends with "<think>\n"; Qwen3 with thinking off ends with "<think>\n\n</think>\n\n").
bool prompt_opens_reasoning(std::string_view rendered_prompt);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(ReasoningStart start = ReasoningStart::kOutside);

  // Adds a delta; returns what became final. Holds back at most a possible tag prefix and the
  // whitespace that may be trimmed.
  ReasoningDelta feed(std::string_view delta);
  // The end of the text: releases what was held back.
  ReasoningDelta finish();

 private:
  enum class State { kBeforeOpen, kReasoning, kContent };
  void process(ReasoningDelta& out);

  State state_;
  std::string pending_;  // text not yet classified
  EdgeTrimmer reasoning_trim_{EdgeTrimmer::Edges::kBoth};
  EdgeTrimmer content_trim_{EdgeTrimmer::Edges::kLeading};
  bool content_after_span_ = false;  // content follows </think> (its leading whitespace is trimmed)
};

}  // namespace kiln
