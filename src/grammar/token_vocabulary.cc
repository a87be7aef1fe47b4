// Building a TokenVocabulary: sort the ids that write bytes by those bytes, then lay the trie out
// in preorder from the sorted list (each token shares its longest common prefix with the previous).
#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace kiln::grammar {

namespace {

// Token bytes longer than this cannot be walked (the trie's depth field); none comes near it.
constexpr size_t kMaxTokenBytes = 65535;

}  // namespace

Result<TokenVocabulary> TokenVocabulary::create(std::vector<std::string> bytes, size_t size,
                                                std::vector<int32_t> stop_ids) {
  if (bytes.size() > size) {
    return invalid_argument("the vocabulary has " + std::to_string(bytes.size()) + " token entries, more than its size " +
                            std::to_string(size));
  }
  if (size > static_cast<size_t>(INT32_MAX)) return invalid_argument("vocabulary size " + std::to_string(size) + " is too large");
  TokenVocabulary v;
  v.size_ = size;
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  for (int32_t id : stop_ids) {
    if (id < 0 || static_cast<size_t>(id) >= size) {
      return invalid_argument("stop token id " + std::to_string(id) + " is outside the vocabulary (size " +
                              std::to_string(size) + ")");
    }
    if (static_cast<size_t>(id) < bytes.size()) bytes[id].clear();  // a stop token writes no text
  }
  v.stop_ids_ = std::move(stop_ids);
  v.bytes_ = std::move(bytes);
  v.writing_.assign(v.mask_words(), 0);
  for (size_t id = 0; id < v.bytes_.size(); ++id) {
    if (v.bytes_[id].empty()) continue;
    if (v.bytes_[id].size() > kMaxTokenBytes) {
      return invalid_argument("token id " + std::to_string(id) + " writes " + std::to_string(v.bytes_[id].size()) +
                              " bytes, more than " + std::to_string(kMaxTokenBytes));
    }
    v.sorted_.push_back(static_cast<int32_t>(id));
    set_bit(v.writing_, static_cast<int32_t>(id));
    v.max_bytes_ = std::max(v.max_bytes_, v.bytes_[id].size());
  }
  std::stable_sort(v.sorted_.begin(), v.sorted_.end(),
                   [&](int32_t a, int32_t b) { return v.bytes_[a] < v.bytes_[b]; });

  std::vector<int32_t> path;  // trie nodes from depth 1 to the previous token's end
  std::string_view prev;
  for (int32_t pos = 0; pos < static_cast<int32_t>(v.sorted_.size()); ++pos) {
    const std::string_view t = v.bytes_[v.sorted_[pos]];
    size_t common = 0;
    while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
    while (path.size() > common) {
      TrieNode& done = v.trie_[path.back()];
      done.next = static_cast<int32_t>(v.trie_.size());
      done.end = pos;
      path.pop_back();
    }
    for (size_t d = common; d < t.size(); ++d) {
      path.push_back(static_cast<int32_t>(v.trie_.size()));
      v.trie_.push_back(TrieNode{0, pos, 0, 0, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(t[d])});
    }
    ++v.trie_[path.back()].ends;
    prev = t;
  }
  while (!path.empty()) {
    TrieNode& done = v.trie_[path.back()];
    done.next = static_cast<int32_t>(v.trie_.size());
    done.end = static_cast<int32_t>(v.sorted_.size());
    path.pop_back();
  }
  return v;
}

Result<TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer, size_t size,
                                                        std::vector<int32_t> stop_ids) {
  std::vector<std::string> bytes(std::min(size, tokenizer.vocab_size()));
  for (size_t id = 0; id < bytes.size(); ++id) {
    // Unknown ids (gaps in the tokenizer's numbering) are errors here and write nothing.
    if (!tokenizer.append_token_bytes(static_cast<TokenId>(id), SpecialTokenOutput::kSkip, false, bytes[id]).ok()) {
      bytes[id].clear();
    }
  }
  return create(std::move(bytes), size, std::move(stop_ids));
}

bool TokenVocabulary::is_stop(int32_t id) const { return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id); }

}  // namespace kiln::grammar
