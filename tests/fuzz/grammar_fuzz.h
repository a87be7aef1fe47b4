// What the grammar fuzz targets share: compile limits small enough for a fuzzer's pace, a
// vocabulary of every single byte plus a few longer tokens, a matcher of a grammar compiled
// under both, and the check that a token mask holds exactly what the matcher accepts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "grammar/automaton.h"
#include "grammar/mask_cache.h"
#include "grammar/matcher.h"

namespace kiln::fuzz {

inline grammar::CompileLimits fuzz_limits() {
  grammar::CompileLimits limits;
  limits.max_nfa_states = 100000;
  limits.max_states = 10000;
  return limits;
}

// Ids 0..255: each byte; 256..: multi-byte tokens; the last id stops.
inline std::shared_ptr<const grammar::TokenVocabulary> fuzz_vocabulary() {
  static const auto vocab = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"ab", "\"}", "\",", "\":", "  ", "{\"", "true", "12", "\xC3\xA9", "\xE4\xB8"}) bytes.push_back(t);
    const int32_t stop = static_cast<int32_t>(bytes.size());
    bytes.push_back("");
    return std::make_shared<const grammar::TokenVocabulary>(
        grammar::TokenVocabulary::create(bytes, bytes.size(), {stop}).value());
  }();
  return vocab;
}

// A matcher over fuzz_vocabulary() for `g` compiled under fuzz_limits(); null when it does not
// compile within them.
inline std::unique_ptr<grammar::Matcher> fuzz_matcher(const grammar::Grammar& g) {
  auto a = grammar::compile_grammar(g, fuzz_limits());
  if (!a.ok()) return nullptr;
  auto automaton = std::make_shared<const grammar::Automaton>(std::move(a).value());
  return std::make_unique<grammar::Matcher>(std::make_shared<const grammar::MaskCache>(automaton, fuzz_vocabulary()));
}

// The mask at the matcher's position equals accepts() of every token (stop: is_complete()).
inline void expect_mask_matches(grammar::Matcher& m, const grammar::TokenVocabulary& vocab, std::vector<uint32_t>& words) {
  expect(m.fill_mask(words).ok(), "a mask of the vocabulary's size is filled");
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
    const bool expected = vocab.is_stop(id) ? m.is_complete() : m.accepts(vocab.bytes(id));
    expect(grammar::has_bit(words.data(), id) == expected, "the mask holds exactly the tokens the matcher accepts");
  }
}

}  // namespace kiln::fuzz
