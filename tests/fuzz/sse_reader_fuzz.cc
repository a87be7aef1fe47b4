// The load generator's SSE reader over a response body arriving in arbitrary chunks
// (fuzz_split.h): whatever the cut, the same events, the same end ([DONE]) and the same pending
// state as the body read whole.
#include <string>
#include <vector>

#include "fuzz_split.h"
#include "fuzz_target.h"
#include "loadgen/sse_reader.h"

namespace {

struct Read {
  std::vector<kiln::loadgen::SseEvent> events;
  bool done = false, partial = false;
};

Read run(const std::vector<std::string_view>& chunks) {
  kiln::loadgen::SseReader r;
  Read out;
  for (std::string_view c : chunks) r.feed(c, out.events);
  out.done = r.done();
  out.partial = r.has_partial_event();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::SplitInput in = kiln::fuzz::split_input(data, size);
  const Read whole = run({in.text});
  const Read cut = run(in.pieces);
  kiln::fuzz::expect(cut.done == whole.done, "[DONE] does not depend on the cut");
  kiln::fuzz::expect(cut.events.size() == whole.events.size(), "the events do not depend on the cut");
  for (size_t i = 0; i < whole.events.size(); ++i)
    kiln::fuzz::expect(cut.events[i].event == whole.events[i].event && cut.events[i].data == whole.events[i].data,
                       "each event does not depend on the cut");
  kiln::fuzz::expect(cut.partial == whole.partial, "the pending state does not depend on the cut");
  return 0;
}
