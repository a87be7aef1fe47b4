// A JSON Schema text (json_schema_grammar, then compile_grammar under small limits). For a
// schema that compiles, a generation drawn from the token masks (seeded by the input, stopping
// as soon as the text may end) must be JSON whenever it stops.
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string_view text = fuzz::as_text(data, size);
  grammar::JsonSchemaOptions options;
  options.max_whitespace = size % 3;
  auto g = grammar::json_schema_grammar(text, options);
  if (!g.ok()) return 0;
  auto matcher = fuzz::fuzz_matcher(*g);
  if (!matcher) return 0;
  grammar::Matcher& m = *matcher;
  auto vocab = fuzz::fuzz_vocabulary();
  std::vector<uint32_t> words(vocab->mask_words());
  std::mt19937_64 rng(std::hash<std::string_view>{}(text));
  std::string out;
  for (int step = 0; step < 256; ++step) {
    fuzz::expect(m.fill_mask(words).ok(), "a mask of the vocabulary's size is filled");
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < static_cast<int32_t>(vocab->size()); ++id) {
      if (grammar::has_bit(words.data(), id)) allowed.push_back(id);
    }
    fuzz::expect(!allowed.empty(), "a live generation always has a next token");
    if (m.is_complete()) {
      fuzz::expect(nlohmann::json::accept(out), "a complete generation is JSON");
      return 0;
    }
    const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    fuzz::expect(m.accept_token(id).ok(), "a token the mask allows is accepted");
    out += vocab->bytes(id);
  }
  return 0;
}
