// The strict JSON reader of qualification documents. A document it accepts must survive its own
// writer: the text written back parses to an equal value, and writing that gives the same text.
#include <string>

#include "fuzz_target.h"
#include "qualify/strict_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::qualify;
  auto doc = parse_strict_json(kiln::fuzz::as_text(data, size));
  if (!doc.ok()) return 0;
  const std::string text = to_json_text(*doc);
  auto again = parse_strict_json(text);
  kiln::fuzz::expect(again.ok(), "the writer's text of an accepted document parses");
  kiln::fuzz::expect(json_equal(*doc, *again), "the written document reads back equal");
  kiln::fuzz::expect(to_json_text(*again, 2) == to_json_text(*doc, 2), "writing is stable");
  return 0;
}
