// The tool-call parser over model output streamed in arbitrary pieces (fuzz_split.h): whatever
// the cut, the content and the tool calls (name, index, arguments) equal those of the text fed
// whole.
#include <string>
#include <vector>

#include "fuzz_split.h"
#include "fuzz_target.h"
#include "server/tool_call_parser.h"

namespace {

const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "tags": {"type": "array"}, "opts": {"type": "object"}, "scale": {"type": ["number", "null"]}}}}}])");

kiln::ToolCallDelta run(const std::vector<std::string_view>& pieces) {
  kiln::ToolCallParser p(kTools);
  kiln::ToolCallDelta all;
  auto add = [&all](kiln::ToolCallDelta d) {
    all.content += d.content;
    for (kiln::ToolCall& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  for (std::string_view piece : pieces) add(p.feed(piece));
  add(p.finish());
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::SplitInput in = kiln::fuzz::split_input(data, size);
  const kiln::ToolCallDelta whole = run({in.text});
  const kiln::ToolCallDelta cut = run(in.pieces);
  kiln::fuzz::expect(cut.content == whole.content, "the content does not depend on the cut");
  kiln::fuzz::expect(cut.tool_calls.size() == whole.tool_calls.size(), "the calls do not depend on the cut");
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    const kiln::ToolCall &a = whole.tool_calls[i], &b = cut.tool_calls[i];
    kiln::fuzz::expect(a.index == b.index && a.name == b.name && a.arguments_json == b.arguments_json,
                       "each call does not depend on the cut");
    (void)a.to_delta_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
