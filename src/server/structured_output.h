// Structured outputs on the server: a request's grammar (a JSON schema, any JSON, a regular
// expression, GBNF, or a forced tool call in the chat template's syntax) compiled through one
// GrammarCache shared by every request, on the handler's thread and within request-sized limits,
// and the TokenConstraint each choice hands the engine (a grammar Matcher). The vocabulary the
// masks cover is built on the first request that asks for a grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/token_constraint.h"
#include "grammar/grammar_cache.h"
#include "grammar/tool_call_grammar.h"

namespace kiln {

class Tokenizer;

// What one request's compile may build (NFA states, DFA states): maxLength 1,000 (25,003 states)
// fits; a grammar past it is refused with a 400 well within a second (docs/grammar.md, "From a
// request to sampling").
inline constexpr grammar::CompileLimits kRequestCompileLimits{300'000, 40'000};

class StructuredOutputs {
 public:
  // `stop_ids`: the model's end-of-text ids, the only tokens allowed once the text is complete.
  StructuredOutputs(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids);

  // The compiled grammar of `spec`; errors are the front ends' and the limits' (400 material).
  Result<std::shared_ptr<const grammar::MaskCache>> compile(const grammar::GrammarSpec& spec);
  // A fresh constraint at the start of `grammar`'s language (one per choice).
  static std::shared_ptr<TokenConstraint> constraint(std::shared_ptr<const grammar::MaskCache> grammar);

 private:
  Result<grammar::GrammarCache*> cache();

  const Tokenizer& tokenizer_;
  int64_t vocab_size_;
  std::vector<int32_t> stop_ids_;
  mutable std::mutex mu_;
  std::unique_ptr<grammar::GrammarCache> cache_;
};

// Where a constrained output starts, so that the reasoning stays free (docs/grammar.md,
// "Reasoning"): after the span's close (`open_id`/`close_id`: <think>, </think>, -1 when the
// tokenizer lacks them) where the prompt leaves it open; where the model may open it itself and
// thinking is on, from the first token unless that token opens the span; else from the first.
struct ConstraintStart {
  int32_t after = -1;          // RequestSpec::constraint_after
  int32_t optional_open = -1;  // RequestSpec::optional_reasoning_open
};
ConstraintStart constraint_start(bool prompt_opens_reasoning, bool thinking, int32_t open_id, int32_t close_id);

// The tool-call syntax a chat template writes (Qwen3.5's XML form where it writes "<function=",
// else Qwen3's JSON form where it writes "<tool_call>"), or nullopt when it writes neither.
std::optional<grammar::ToolCallSyntax> tool_call_syntax_of(std::string_view template_source);

}  // namespace kiln
