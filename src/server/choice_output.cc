#include "server/choice_output.h"

namespace kiln {

ChoiceOutput::ChoiceOutput(ChoiceOutputOptions options) : stop_(std::move(options.stop)) {
  if (options.parse_reasoning) {
    reasoning_parser_.emplace(options.starts_in_reasoning ? ReasoningStart::kInside : ReasoningStart::kOutside);
  }
  if (options.parse_tool_calls) tool_parser_.emplace(std::move(options.tools));
}

OutputDelta ChoiceOutput::feed(std::string_view text) {
  if (finished_) return {};
  const std::string released = stop_.feed(text);
  return route(released, stop_.stopped());
}

OutputDelta ChoiceOutput::finish() {
  if (finished_) return {};
  const std::string released = stop_.finish();
  return route(released, /*end=*/true);
}

OutputDelta ChoiceOutput::route(std::string_view text, bool end) {
  OutputDelta out;
  std::string content;
  if (reasoning_parser_) {
    ReasoningDelta r = reasoning_parser_->feed(text);
    if (end) {
      ReasoningDelta tail = reasoning_parser_->finish();
      r.reasoning += tail.reasoning;
      r.content += tail.content;
    }
    out.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  } else {
    content = std::string(text);
  }
  if (tool_parser_) {
    ToolCallDelta t = tool_parser_->feed(content);
    if (end) {
      ToolCallDelta tail = tool_parser_->finish();
      t.content += tail.content;
      for (ToolCall& call : tail.tool_calls) t.tool_calls.push_back(std::move(call));
    }
    out.content = std::move(t.content);
    out.tool_calls = std::move(t.tool_calls);
  } else {
    out.content = std::move(content);
  }
  if (end) finished_ = true;
  reasoning_ += out.reasoning;
  content_ += out.content;
  tool_calls_.insert(tool_calls_.end(), out.tool_calls.begin(), out.tool_calls.end());
  return out;
}

}  // namespace kiln
