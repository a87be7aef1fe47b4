// A model's vocabulary as grammars see it: the bytes each token id writes, the ids that stop
// generation, and the tokens sorted by their bytes into a trie walked in preorder (built once per
// vocabulary and shared by every grammar's token masks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln {
class Tokenizer;
}

namespace kiln::grammar {

class TokenVocabulary {
 public:
  // `bytes[id]`: what token `id` writes; empty: a grammar never allows it. `size`: the model's
  // vocabulary (at least bytes.size(); ids past bytes write nothing). `stop_ids`: allowed exactly
  // where the text so far is complete. Errors name the stop id at fault.
  static Result<TokenVocabulary> create(std::vector<std::string> bytes, size_t size, std::vector<int32_t> stop_ids);
  // From a tokenizer: each id's decoded bytes; special tokens write nothing here.
  static Result<TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer, size_t size, std::vector<int32_t> stop_ids);

  size_t size() const { return size_; }
  size_t mask_words() const { return (size_ + 31) / 32; }  // one bit per id
  std::string_view bytes(int32_t id) const {
    return static_cast<size_t>(id) < bytes_.size() ? std::string_view(bytes_[id]) : std::string_view();
  }
  bool is_stop(int32_t id) const;
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // Bits of every id that writes bytes.
  const std::vector<uint32_t>& writing_ids() const { return writing_; }

  // Ids that write bytes, ordered by their bytes; a "position" indexes this order.
  size_t token_count() const { return sorted_.size(); }
  int32_t sorted_id(int32_t pos) const { return sorted_[pos]; }
  std::string_view sorted_bytes(int32_t pos) const { return bytes_[sorted_[pos]]; }

  // Trie nodes in preorder. A node is one byte at `depth` (1 for a token's first byte); the
  // tokens whose bytes pass through it are positions [first, end), those ending at it first.
  struct TrieNode {
    int32_t next;   // the node after this one's subtree
    int32_t first;  // first token position through this node
    int32_t end;    // one past the last
    int32_t ends;   // how many tokens end here (positions first .. first + ends)
    uint16_t depth;
    uint8_t byte;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  size_t max_token_bytes() const { return max_bytes_; }

 private:
  size_t size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;  // sorted
  std::vector<uint32_t> writing_;
  std::vector<int32_t> sorted_;
  std::vector<TrieNode> trie_;
  size_t max_bytes_ = 0;
};

inline void set_bit(std::vector<uint32_t>& words, int32_t id) { words[id >> 5] |= 1u << (id & 31); }
inline bool has_bit(const uint32_t* words, int32_t id) { return (words[id >> 5] >> (id & 31)) & 1; }

}  // namespace kiln::grammar
