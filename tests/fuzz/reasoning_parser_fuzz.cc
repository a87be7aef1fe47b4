// The reasoning parser over model output streamed in arbitrary pieces (fuzz_split.h), starting
// outside the span or inside it (bit 4 of the first byte): whatever the cut, the reasoning and
// the content equal those of the text fed whole.
#include <string>
#include <vector>

#include "fuzz_split.h"
#include "fuzz_target.h"
#include "server/reasoning_parser.h"

namespace {

kiln::ReasoningDelta run(kiln::ReasoningStart start, const std::vector<std::string_view>& pieces) {
  kiln::ReasoningParser p(start);
  kiln::ReasoningDelta all;
  auto add = [&all](const kiln::ReasoningDelta& d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
  };
  for (std::string_view piece : pieces) add(p.feed(piece));
  add(p.finish());
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto start = data[0] & 0x10 ? kiln::ReasoningStart::kInside : kiln::ReasoningStart::kOutside;
  const kiln::fuzz::SplitInput in = kiln::fuzz::split_input(data, size);
  (void)kiln::prompt_opens_reasoning(in.text);
  const kiln::ReasoningDelta whole = run(start, {in.text});
  const kiln::ReasoningDelta cut = run(start, in.pieces);
  kiln::fuzz::expect(cut.reasoning == whole.reasoning, "the reasoning does not depend on the cut");
  kiln::fuzz::expect(cut.content == whole.content, "the content does not depend on the cut");
  return 0;
}
