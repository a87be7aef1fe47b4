// Added tokens (tokenizer.json "added_tokens"): matched in the text before the model runs, with
// the tokenizers library's rules for lstrip, rstrip, single_word and normalized.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/bpe_model.h"

namespace kiln {

class Normalizer;

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A piece of input text: either text for the model or one added token.
struct TextPiece {
  size_t begin, end;  // byte range in the text that was split
  TokenId token;      // -1 for plain text
};

enum class SpecialTokens {
  kRecognize,   // special added tokens in the text become their ids (the tokenizers default)
  kTreatAsText  // special added tokens are tokenised as ordinary text
};

class AddedVocabulary {
 public:
  // Ids are assigned as the tokenizers library assigns them when it loads tokenizer.json: a token
  // whose content is in the model's vocabulary takes the model's id; any other takes the next id
  // after the added ids so far (the first one: the model's vocabulary size). The "id" written in
  // tokenizer.json does not count (the library only warns when it differs).
  static Result<AddedVocabulary> from_json(const nlohmann::json& added_tokens, const Normalizer& normalizer,
                                           const TokenIndex& model_vocab);

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_by_id(TokenId id) const;
  const AddedToken* find_by_content(std::string_view content) const;

  // Splits `text` around the tokens of one pass: those matched against raw text
  // (normalized == false) or against normalised text (normalized == true).
  enum class Pass { kRaw, kNormalized };
  void split(std::string_view text, Pass pass, SpecialTokens special, std::vector<TextPiece>& out) const;

 private:
  // A byte trie over the contents of one pass, for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node
      int32_t token = -1;  // index into tokens_ of the token ending here
    };
    std::vector<Node> nodes = std::vector<Node>(1);
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() == 1; }
    void insert(std::string_view key, int32_t token);
    // The longest key starting at `pos` (its token index and end), or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t* end) const;
  };

  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
};

}  // namespace kiln
