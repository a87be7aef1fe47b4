// BPE merging: repeatedly merge the adjacent pair of lowest rank (leftmost first on ties) until no
// pair has a merge, as the tokenizers library does.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace kiln {
namespace {

// Words with more symbols than this merge through a heap; shorter ones by scanning.
constexpr size_t kScanLimit = 48;

Status reject_if_set(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return {};
  const auto& v = config[key];
  const bool set = !(v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
                     (v.is_number() && v.get<double>() == 0.0));
  if (set) return unsupported("BPE option \"" + std::string(key) + "\" = " + v.dump() + " is not supported");
  return {};
}

}  // namespace

Result<BpeModel> BpeModel::from_json(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("vocab") || !config["vocab"].is_object()) {
    return format_error("model: expected an object with an object \"vocab\"");
  }
  if (config.contains("type") && config["type"] != "BPE") {
    return unsupported("model type " + config["type"].dump() + " is not supported (supported: BPE)");
  }
  for (const char* key : {"dropout", "byte_fallback", "fuse_unk", "continuing_subword_prefix", "end_of_word_suffix"}) {
    KILN_RETURN_IF_ERROR(reject_if_set(config, key));
  }
  BpeModel m;
  const auto& vocab = config["vocab"];
  m.vocab_.reserve(vocab.size());
  TokenId max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > kMaxTokenId) {
      return format_error("model vocab: token \"" + it.key() + "\" has id " + it.value().dump() +
                          ", expected an integer in [0, " + std::to_string(kMaxTokenId) + "]");
    }
    const auto id = static_cast<TokenId>(it.value().get<int64_t>());
    m.vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  m.tokens_.resize(max_id + 1);
  m.has_token_.assign(max_id + 1, false);
  for (const auto& [token, id] : m.vocab_) {
    m.tokens_[id] = token;
    m.has_token_[id] = true;
  }
  if (config.contains("ignore_merges") && !config["ignore_merges"].is_null()) {
    if (!config["ignore_merges"].is_boolean())
      return format_error("model: \"ignore_merges\" must be true or false, got " + config["ignore_merges"].dump());
    m.ignore_merges_ = config["ignore_merges"].get<bool>();
  }
  if (config.contains("unk_token") && config["unk_token"].is_string()) {
    const std::string unk = config["unk_token"];
    auto it = m.vocab_.find(unk);
    if (it == m.vocab_.end()) return format_error("model: unk_token \"" + unk + "\" is not in the vocabulary");
    m.unk_id_ = it->second;
  }

  const nlohmann::json empty = nlohmann::json::array();
  const auto& merges = config.contains("merges") ? config["merges"] : empty;
  if (!merges.is_array()) return format_error("model: \"merges\" must be an array");
  m.merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& entry = merges[rank];
    std::string a, b;
    if (entry.is_string()) {
      const std::string s = entry;
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return format_error("model merges[" + std::to_string(rank) + "] = \"" + s + "\": expected two tokens separated by one space");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      a = entry[0];
      b = entry[1];
    } else {
      return format_error("model merges[" + std::to_string(rank) + "] = " + entry.dump() + ": expected \"a b\" or [a, b]");
    }
    auto ia = m.vocab_.find(a), ib = m.vocab_.find(b), ir = m.vocab_.find(a + b);
    if (ia == m.vocab_.end() || ib == m.vocab_.end() || ir == m.vocab_.end()) {
      return format_error("model merges[" + std::to_string(rank) + "] (\"" + a + "\", \"" + b +
                          "\") uses a token missing from the vocabulary");
    }
    // The first occurrence of a pair wins, as in the tokenizers library.
    m.merges_.emplace(pair_key(ia->second, ib->second), Merge{static_cast<uint32_t>(rank), ir->second});
  }

  const auto& alphabet = ByteLevelAlphabet::get();
  m.has_byte_ids_ = true;
  for (int b = 0; b < 256; ++b) {
    auto it = m.vocab_.find(alphabet.utf8_of(static_cast<uint8_t>(b)));
    if (it == m.vocab_.end()) {
      m.has_byte_ids_ = false;
      break;
    }
    m.byte_ids_[b] = it->second;
  }
  return m;
}

bool BpeModel::byte_level_complete() const { return has_byte_ids_; }

void BpeModel::merge_symbols(std::vector<TokenId>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  if (n <= kScanLimit) {
    size_t len = n;
    while (len > 1) {
      uint32_t best_rank = UINT32_MAX;
      size_t best = 0;
      TokenId best_result = 0;
      for (size_t i = 0; i + 1 < len; ++i) {
        const Merge* m = find_merge(symbols[i], symbols[i + 1]);
        if (m != nullptr && m->rank < best_rank) {
          best_rank = m->rank;
          best = i;
          best_result = m->result;
        }
      }
      if (best_rank == UINT32_MAX) break;
      symbols[best] = best_result;
      std::copy(symbols.begin() + best + 2, symbols.begin() + len, symbols.begin() + best + 1);
      --len;
    }
    symbols.resize(len);
    return;
  }
  // Long words: a doubly linked list of symbols and a heap of candidate merges, each checked for
  // staleness when popped.
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    TokenId left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = find_merge(symbols[i], symbols[next[i]])) heap.push({m->rank, i, symbols[i], symbols[next[i]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t j = next[c.pos];
    if (!alive[c.pos] || j < 0 || symbols[c.pos] != c.left || symbols[j] != c.right) continue;
    symbols[c.pos] = find_merge(c.left, c.right)->result;
    alive[j] = false;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

bool BpeModel::tokenize(std::string_view word, bool byte_level, Scratch& scratch, std::vector<TokenId>& out) const {
  if (word.empty()) return true;
  bool cached = false;
  const std::span<const TokenId> hit = scratch.cache.find(word, &cached);
  if (cached) {
    out.insert(out.end(), hit.begin(), hit.end());
    return true;
  }
  std::vector<TokenId>& symbols = scratch.symbols;
  symbols.clear();
  bool whole = false;
  if (ignore_merges_) {
    std::string_view text = word;
    if (byte_level) {
      scratch.mapped = ByteLevelAlphabet::get().encode(word);
      text = scratch.mapped;
    }
    auto it = vocab_.find(text);
    if (it != vocab_.end()) {
      symbols.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    if (byte_level) {
      for (unsigned char b : word) symbols.push_back(byte_ids_[b]);
    } else {
      const std::string_view text = word;
      size_t i = 0;
      while (i < text.size()) {
        size_t len;
        utf8::decode(text, i, &len);
        auto it = vocab_.find(text.substr(i, len));
        if (it != vocab_.end()) {
          symbols.push_back(it->second);
        } else if (unk_id_ >= 0) {
          symbols.push_back(unk_id_);
        } else {
          return false;
        }
        i += len;
      }
    }
    merge_symbols(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  scratch.cache.insert(word, symbols);
  return true;
}

}  // namespace kiln
