// ChoiceOutput: one choice's generated text turned into OpenAI output: stop strings, then the
// <think> span (reasoning_content), then <tool_call> spans (tool_calls), the rest as content.
// Streaming returns deltas; their concatenation equals the accumulated non-streaming result.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/reasoning_parser.h"
#include "server/stop_matcher.h"
#include "server/tool_call_parser.h"

namespace kiln {

struct ChoiceOutputOptions {
  std::vector<std::string> stop;       // the request's stop strings
  bool starts_in_reasoning = false;    // prompt_opens_reasoning(rendered prompt)
  bool parse_reasoning = true;         // false: <think> spans are content
  bool parse_tool_calls = false;       // true when the request has tools
  nlohmann::ordered_json tools;        // the request's tools (types XML-ish parameter values)
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChoiceOutput {
 public:
  explicit ChoiceOutput(ChoiceOutputOptions options);

  // Adds detokenised text (whole code points); returns what became final. When a stop string
  // matches, the output ends here (as if finish() were called): stop generating.
  OutputDelta feed(std::string_view text);
  // The end of generation: releases everything held back. Later calls return empty deltas.
  OutputDelta finish();
  // True once a stop string matched.
  bool stopped() const { return stop_.stopped(); }

  // Everything emitted so far (complete after finish() or a stop).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& tool_calls() const { return tool_calls_; }

 private:
  // Passes post-stop text through the parsers; `end` also finishes them.
  OutputDelta route(std::string_view text, bool end);

  StopMatcher stop_;
  std::optional<ReasoningParser> reasoning_parser_;
  std::optional<ToolCallParser> tool_parser_;
  bool finished_ = false;
  std::string reasoning_;
  std::string content_;
  std::vector<ToolCall> tool_calls_;
};

}  // namespace kiln
