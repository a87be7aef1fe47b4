// ToolCallParser: finds the tool calls a Qwen model writes into its content, <tool_call> ...
// </tool_call>, and turns them into OpenAI tool_calls, streaming. Two body formats:
//   JSON (Qwen2.5, Qwen3):        {"name": "f", "arguments": {"city": "Paris"}}
//   XML-ish (Qwen3.5, Qwen3-Coder): <function=f>\n<parameter=city>\nParis\n</parameter>\n</function>
// A span that does not parse (bad JSON, no function name) stays in the content as written.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/text_holdback.h"

namespace kiln {

struct ToolCall {
  int index = 0;               // position among the choice's tool calls
  std::string id;              // "call_" + 24 random alphanumerics
  std::string name;
  std::string arguments_json;  // a JSON object, serialised

  // {"id", "type": "function", "function": {"name", "arguments"}}: a message's tool_calls entry.
  nlohmann::json to_json() const;
  // to_json() with "index": a streamed delta's tool_calls entry (sent whole, once).
  nlohmann::json to_delta_json() const;
};

struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

class ToolCallParser {
 public:
  // `tools`: the request's OpenAI tools list ([{"type": "function", "function": {"name",
  // "parameters": <JSON schema>}}]) or null. It types XML-ish parameter values: a parameter whose
  // declared type (or one of them) is integer, number, boolean, object, array or null takes the
  // value parsed as JSON when that parse yields such a type (integer and number accept any JSON
  // number); otherwise, and for string, the raw text is a string. An undeclared parameter is
  // parsed as JSON, falling back to the raw string.
  explicit ToolCallParser(nlohmann::ordered_json tools = nullptr);

  // Adds a delta of content; text outside spans streams through, a span is withheld until it
  // closes and then comes out as one complete tool call. The content is trimmed of ASCII
  // whitespace (space, \t, \n, \r) at its start and its end (a whitespace run is held back until
  // non-whitespace content follows it).
  ToolCallDelta feed(std::string_view delta);
  // The end of the content. A span still open becomes a tool call if its body parses whole,
  // otherwise content.
  ToolCallDelta finish();

 private:
  void close_span(std::string_view body, bool closed, ToolCallDelta& out);

  nlohmann::ordered_json tools_;
  bool in_span_ = false;
  std::string pending_;  // outside a span: a possible "<tool_call>" prefix; inside: the body so far
  EdgeTrimmer content_trim_{EdgeTrimmer::Edges::kBoth};
  int next_index_ = 0;
};

}  // namespace kiln
