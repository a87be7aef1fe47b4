// A GBNF text (parse_gbnf, then compile_grammar under small limits). The input is the grammar,
// then optionally "\n%%\n" and a probe: the probe is matched byte by byte, and at every step the
// token mask must hold exactly the tokens the matcher accepts.
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string_view input = fuzz::as_text(data, size);
  const size_t cut = input.find("\n%%\n");
  const std::string_view text = input.substr(0, cut);
  const std::string_view probe = cut == std::string_view::npos ? std::string_view() : input.substr(cut + 4);
  auto g = grammar::parse_gbnf(text);
  if (!g.ok()) return 0;
  auto matcher = fuzz::fuzz_matcher(*g);
  if (!matcher) return 0;
  grammar::Matcher& m = *matcher;
  auto vocab = fuzz::fuzz_vocabulary();
  std::vector<uint32_t> words(vocab->mask_words());
  fuzz::expect_mask_matches(m, *vocab, words);
  for (size_t i = 0; i < probe.size() && i < 64; ++i) {
    const std::string_view b = probe.substr(i, 1);
    const bool accepted = m.accepts(b);
    fuzz::expect(m.advance(b) == accepted, "advance() agrees with accepts()");
    if (!accepted) break;
    fuzz::expect_mask_matches(m, *vocab, words);
  }
  return 0;
}
