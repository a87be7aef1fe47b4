// What the grammar tests share: compiling a GBNF text, enumerating every string a grammar admits
// up to a length (byte by byte through a Matcher), and seeded random walks over bytes.
#pragma once

#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "grammar/automaton.h"
#include "grammar/gbnf.h"
#include "grammar/mask_cache.h"
#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"
#include "tokenizer/qwen3_dir.h"
#include "tokenizer/tokenizer.h"

namespace kiln::grammar::testing {

inline std::shared_ptr<const Automaton> compile_or_die(Result<Grammar> g) {
  if (!g.ok()) {
    ADD_FAILURE() << g.status().to_string();
    return nullptr;
  }
  auto a = compile_grammar(*g);
  if (!a.ok()) {
    ADD_FAILURE() << a.status().to_string();
    return nullptr;
  }
  return std::make_shared<const Automaton>(std::move(a).value());
}

inline std::shared_ptr<const Automaton> gbnf(std::string_view text) { return compile_or_die(parse_gbnf(text)); }

// Every complete string of at most `max_len` bytes. `truncated` is set when some string reaches
// max_len and could go on (the language has longer strings).
inline std::set<std::string> enumerate(const std::shared_ptr<const Automaton>& a, size_t max_len, bool* truncated = nullptr) {
  std::set<std::string> out;
  if (truncated) *truncated = false;
  std::vector<std::string> todo{""};
  while (!todo.empty()) {
    const std::string prefix = todo.back();
    todo.pop_back();
    Matcher m(a);
    if (!m.advance(prefix)) {
      ADD_FAILURE() << "a prefix the enumeration reached is refused: " << prefix;
      continue;
    }
    if (m.is_complete()) out.insert(prefix);
    for (int b = 0; b < 256; ++b) {
      const std::string next(1, static_cast<char>(b));
      if (!m.accepts(next)) continue;
      if (prefix.size() == max_len) {
        if (truncated) *truncated = true;
        continue;
      }
      todo.push_back(prefix + next);
    }
  }
  return out;
}

// A random complete string: bytes drawn uniformly among those allowed, stopping with
// probability `stop` where the text is complete (always where nothing may follow). Empty
// optional when no complete string came within `max_len` bytes.
inline std::optional<std::string> random_bytes(const std::shared_ptr<const Automaton>& a, std::mt19937_64& rng,
                                               size_t max_len, double stop = 0.2) {
  Matcher m(a);
  std::string text;
  while (text.size() <= max_len) {
    if (m.is_complete() && (!m.can_continue() || std::uniform_real_distribution<double>(0, 1)(rng) < stop)) return text;
    std::vector<char> allowed;
    for (int b = 0; b < 256; ++b) {
      const std::string next(1, static_cast<char>(b));
      if (m.accepts(next)) allowed.push_back(static_cast<char>(b));
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "a live text has no byte to continue with: " << text;
      return std::nullopt;
    }
    const char b = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    EXPECT_TRUE(m.advance(std::string(1, b)));
    text.push_back(b);
  }
  return std::nullopt;
}

// The model's vocabulary size: more ids than the tokenizer has (those write nothing).
inline constexpr size_t kModelVocab = 248320;

// The real Qwen3 vocabulary at the model's size, stopping on <|im_end|> and <|endoftext|>;
// loaded once. Null, with a failure that says how to fetch it, when the tokenizer is absent.
inline std::shared_ptr<const TokenVocabulary> qwen3_vocabulary() {
  static const std::shared_ptr<const TokenVocabulary> vocab = []() -> std::shared_ptr<const TokenVocabulary> {
    auto tok = Tokenizer::load(kiln::testing::qwen3_dir());
    if (!tok.ok()) return nullptr;
    std::vector<int32_t> stops;
    for (const char* s : {"<|im_end|>", "<|endoftext|>"}) {
      if (auto id = tok->token_to_id(s)) stops.push_back(*id);
    }
    auto v = TokenVocabulary::from_tokenizer(*tok, kModelVocab, stops);
    return v.ok() ? std::make_shared<const TokenVocabulary>(std::move(v).value()) : nullptr;
  }();
  if (!vocab) {
    ADD_FAILURE() << "the Qwen3 tokenizer is missing at " << kiln::testing::qwen3_dir()
                  << "; run scripts/fetch-tokenizer (needs npm) first";
  }
  return vocab;
}

// Ids whose bit is set in `words`.
inline std::vector<int32_t> set_ids(const std::vector<uint32_t>& words) {
  std::vector<int32_t> ids;
  for (size_t w = 0; w < words.size(); ++w) {
    for (uint32_t bits = words[w]; bits; bits &= bits - 1) ids.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(bits)));
  }
  return ids;
}

struct TokenWalk {
  std::string text;
  size_t tokens = 0;
  bool stopped = false;  // ended on a stop token (else it ran out of tokens)
};

// A seeded random generation: each step draws uniformly among the tokens the mask allows, as a
// model producing noise would end up doing under the constraint.
inline TokenWalk random_tokens(const std::shared_ptr<const MaskCache>& masks, std::mt19937_64& rng, size_t max_tokens) {
  Matcher m(masks);
  TokenWalk walk;
  std::vector<uint32_t> words(masks->vocabulary().mask_words());
  while (walk.tokens < max_tokens) {
    const Status st = m.fill_mask(words);
    if (!st.ok()) {
      ADD_FAILURE() << st.to_string();
      return walk;
    }
    const std::vector<int32_t> ids = set_ids(words);
    if (ids.empty()) {
      ADD_FAILURE() << "no token is allowed after " << walk.text;
      return walk;
    }
    const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    const Status accepted = m.accept_token(id);
    if (!accepted.ok()) {
      ADD_FAILURE() << "a token the mask allowed is refused: " << accepted.to_string();
      return walk;
    }
    ++walk.tokens;
    if (m.is_stopped()) {
      walk.stopped = true;
      return walk;
    }
    walk.text += masks->vocabulary().bytes(id);
  }
  return walk;
}

}  // namespace kiln::grammar::testing
