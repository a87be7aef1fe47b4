// tokenizer.json: parsed (nesting limit) and built into a Tokenizer; one that loads encodes a
// fixed multilingual text with special tokens and decodes the ids back, both ways.
#include <string>
#include <vector>

#include "core/json_text.h"
#include "fuzz_target.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = kiln::parse_json(kiln::fuzz::as_text(data, size), "tokenizer.json");
  if (!config.ok()) return 0;
  auto tok = kiln::Tokenizer::from_json(*config, "tokenizer.json");
  if (!tok.ok()) return 0;
  static const std::string kText =
      "<|im_start|>user\nHello, wörld! 123 4567 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80  tabs\tand\r\n"
      "newlines<|im_end|> don't \xff\xfe bytes";
  for (auto special : {kiln::SpecialTokens::kRecognize, kiln::SpecialTokens::kTreatAsText}) {
    const std::vector<kiln::TokenId> ids = tok->encode(kText, special);
    for (auto out : {kiln::SpecialTokenOutput::kKeep, kiln::SpecialTokenOutput::kSkip}) {
      auto text = tok->decode(ids, out);
      kiln::fuzz::expect(text.ok(), "the ids encode gives are ids decode takes");
    }
  }
  return 0;
}
