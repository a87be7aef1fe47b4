// Leftmost-longest matching over a byte trie, then the single_word / lstrip / rstrip rules applied
// to each match in order, as the tokenizers library's AddedVocabulary does.
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include <utf8proc.h>

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace kiln {
namespace {

// Rust regex's Unicode \w: alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends `s` (well-formed, non-empty).
char32_t last_code_point(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  size_t len;
  return utf8::decode(s, i, &len);
}

// Start of the run of White_Space that ends `s`.
size_t trailing_space_start(std::string_view s) {
  size_t start = s.size();
  while (start > 0) {
    size_t i = start - 1;
    while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
    size_t len;
    if (!utf8::is_white_space(utf8::decode(s, i, &len))) break;
    start = i;
  }
  return start;
}

// Length of the run of White_Space that starts `s`.
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    if (!utf8::is_white_space(utf8::decode(s, i, &len))) break;
    i += len;
  }
  return i;
}

// An added token's boolean option: `fallback` when absent or null, an error naming it otherwise.
Result<bool> flag(const nlohmann::json& token, const char* key, bool fallback, const std::string& where) {
  if (!token.contains(key) || token[key].is_null()) return fallback;
  if (!token[key].is_boolean())
    return format_error(where + "." + key + ": expected true or false, got " + token[key].dump());
  return token[key].get<bool>();
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  int32_t node = 0;
  for (unsigned char c : key) {
    int32_t child = -1;
    for (const auto& [byte, index] : nodes[node].children) {
      if (byte == c) child = index;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(c, child);
      nodes.emplace_back();
    }
    node = child;
  }
  // Two tokens with the same text: the first one listed wins.
  if (nodes[node].token < 0) nodes[node].token = token;
  first_byte[static_cast<uint8_t>(key[0])] = true;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t* end) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    int32_t child = -1;
    for (const auto& [byte, index] : nodes[node].children) {
      if (byte == static_cast<uint8_t>(text[i])) child = index;
    }
    if (child < 0) break;
    node = child;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      *end = i + 1;
    }
  }
  return best;
}

Result<AddedVocabulary> AddedVocabulary::from_json(const nlohmann::json& added_tokens, const Normalizer& normalizer,
                                                  const TokenIndex& model_vocab) {
  AddedVocabulary v;
  if (added_tokens.is_null()) return v;
  if (!added_tokens.is_array()) return format_error("added_tokens: expected an array");
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const auto& t = added_tokens[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      return format_error(where + ": expected an object with an integer \"id\" and a string \"content\"");
    }
    AddedToken token;
    token.content = t["content"].get<std::string>();
    if (token.content.empty()) return format_error(where + ": empty \"content\"");
    if (!utf8::is_valid(token.content)) return format_error(where + ": \"content\" is not valid UTF-8");
    KILN_ASSIGN_OR_RETURN(token.special, flag(t, "special", false, where));
    KILN_ASSIGN_OR_RETURN(token.lstrip, flag(t, "lstrip", false, where));
    KILN_ASSIGN_OR_RETURN(token.rstrip, flag(t, "rstrip", false, where));
    KILN_ASSIGN_OR_RETURN(token.single_word, flag(t, "single_word", false, where));
    KILN_ASSIGN_OR_RETURN(token.normalized, flag(t, "normalized", !token.special, where));
    auto same = std::find_if(v.tokens_.begin(), v.tokens_.end(), [&](const AddedToken& a) { return a.content == token.content; });
    if (same != v.tokens_.end()) {
      // The same text again: the library keeps its id and takes the new flags.
      if (same->normalized != token.normalized) {
        return unsupported(where + ": \"" + token.content + "\" is listed twice with different \"normalized\"");
      }
      token.id = same->id;
      *same = std::move(token);
      continue;
    }
    if (auto in_model = model_vocab.find(token.content); in_model != model_vocab.end()) {
      token.id = in_model->second;
    } else {
      const auto vocab_size = static_cast<TokenId>(model_vocab.size());
      TokenId max_added = -1;
      for (const auto& a : v.tokens_) max_added = std::max(max_added, a.id);
      token.id = max_added < 0 ? vocab_size : (max_added >= vocab_size || vocab_size == 0 ? max_added + 1 : vocab_size);
    }
    const auto index = static_cast<int32_t>(v.tokens_.size());
    if (token.normalized) {
      const std::string match = normalizer.normalize(token.content);
      if (!match.empty()) v.normalized_.insert(match, index);
    } else {
      v.raw_.insert(token.content, index);
    }
    v.tokens_.push_back(std::move(token));
  }
  return v;
}

const AddedToken* AddedVocabulary::find_by_id(TokenId id) const {
  for (const auto& t : tokens_) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

const AddedToken* AddedVocabulary::find_by_content(std::string_view content) const {
  for (const auto& t : tokens_) {
    if (t.content == content) return &t;
  }
  return nullptr;
}

void AddedVocabulary::split(std::string_view text, Pass pass, SpecialTokens special, std::vector<TextPiece>& out) const {
  const Trie& trie = pass == Pass::kRaw ? raw_ : normalized_;
  size_t emitted = 0;  // end of the last piece pushed
  if (!trie.empty()) {
    size_t pos = 0;
    while (pos < text.size()) {
      if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
        ++pos;
        continue;
      }
      size_t stop = 0;
      const int32_t index = trie.longest_at(text, pos, &stop);
      if (index < 0) {
        ++pos;
        continue;
      }
      size_t start = pos;
      pos = stop;  // matching resumes after this match whether or not it is kept
      const AddedToken& token = tokens_[index];
      if (special == SpecialTokens::kTreatAsText && token.special) continue;
      if (token.single_word) {
        const bool word_before = start > 0 && is_word_char(last_code_point(text.substr(0, start)));
        size_t len = 0;
        const bool word_after = stop < text.size() && is_word_char(utf8::decode(text, stop, &len));
        if (word_before || word_after) continue;
      }
      if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
      if (token.rstrip) stop += leading_space_length(text.substr(stop));
      if (emitted < start) out.push_back({emitted, start, -1});
      out.push_back({start, stop, token.id});
      emitted = stop;
      pos = stop;
    }
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace kiln
