// The tokenizer.json "model" of type BPE: vocabulary, ranked merges, and the merge loop that turns
// one word into token ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/word_cache.h"

namespace kiln {

using TokenId = int32_t;
// The largest id a tokenizer.json may give: ids index dense tables, so a file of a few bytes
// could otherwise ask for gigabytes. 2^24 - 1 is 64 times the largest vocabulary in use.
inline constexpr TokenId kMaxTokenId = (1 << 24) - 1;

// Hashing for heterogeneous (string_view) lookups in string-keyed maps.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Accepts merges as "a b" strings or [a, b] pairs, ignore_merges, unk_token; rejects dropout,
  // byte_fallback, subword prefixes/suffixes and other model types by name.
  static Result<BpeModel> from_json(const nlohmann::json& config);

  // Per-thread scratch: the word cache and merge buffers. Not shared between threads.
  struct Scratch {
    WordCache cache;
    std::vector<TokenId> symbols;
    std::string mapped;
  };

  // Appends the ids of one word. With `byte_level` the word is raw bytes read through the
  // byte-level alphabet; otherwise it is text in the vocabulary's own alphabet. Returns false
  // when a character has no token and there is no unk token.
  bool tokenize(std::string_view word, bool byte_level, Scratch& scratch, std::vector<TokenId>& out) const;

  const TokenIndex& vocab() const { return vocab_; }
  // The token string of `id`, or null when the model has no such id.
  const std::string* token_of(TokenId id) const {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() && has_token_[id] ? &tokens_[id] : nullptr;
  }
  size_t vocab_size() const { return vocab_.size(); }
  // One more than the largest id: ids may skip numbers, or repeat, so this can exceed vocab_size().
  size_t id_limit() const { return tokens_.size(); }
  bool has_unk() const { return unk_id_ >= 0; }
  // True when every byte-level alphabet character is a token (required by byte-level words).
  bool byte_level_complete() const;

 private:
  struct Merge {
    uint32_t rank;
    TokenId result;
  };
  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* find_merge(TokenId a, TokenId b) const {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void merge_symbols(std::vector<TokenId>& symbols) const;

  TokenIndex vocab_;
  std::vector<std::string> tokens_;  // id -> token
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  TokenId byte_ids_[256] = {};  // byte -> id of its alphabet character (byte-level only)
  bool has_byte_ids_ = false;
  bool ignore_merges_ = false;
  TokenId unk_id_ = -1;
};

}  // namespace kiln
