// A Hugging Face tokenizer.json pipeline: added tokens, normaliser, pre-tokenizer, BPE model and
// decoder. Encoding is thread-safe (per-thread scratch); decoding is exact to the tokenizers
// library, including U+FFFD for byte sequences that are not UTF-8.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace kiln {

enum class SpecialTokenOutput {
  kKeep,  // special tokens decode to their text ("<|im_end|>")
  kSkip   // special tokens decode to nothing (skip_special_tokens=True)
};

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, or a folder that holds one.
  static Result<Tokenizer> load(const std::string& path);
  // Builds from parsed tokenizer.json; `source` names it in error messages. Any component this
  // build does not implement is an error that names it.
  static Result<Tokenizer> from_json(const nlohmann::json& config, const std::string& source);

  // Token ids of `text`. Bytes that are not UTF-8 are replaced by U+FFFD first (maximal
  // subparts), as decoding them with errors="replace" would.
  std::vector<TokenId> encode(std::string_view text, SpecialTokens special = SpecialTokens::kRecognize) const;
  // encode() of each text, spread over the default thread pool.
  std::vector<std::vector<TokenId>> encode_batch(std::span<const std::string> texts,
                                                 SpecialTokens special = SpecialTokens::kRecognize) const;

  // The text of `ids`; an id outside the vocabulary is an error naming it.
  Result<std::string> decode(std::span<const TokenId> ids,
                             SpecialTokenOutput special = SpecialTokenOutput::kKeep) const;
  // The raw bytes one token contributes to decode() (before UTF-8 replacement), or an error for
  // an unknown id. `first` says whether it is the first token emitted (separator rule).
  Status append_token_bytes(TokenId id, SpecialTokenOutput special, bool first, std::string& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  // The token string (vocabulary alphabet) of `id`.
  Result<std::string> id_to_token(TokenId id) const;
  // One more than the largest id (model vocabulary plus added tokens).
  size_t vocab_size() const { return id_bytes_.size(); }
  bool is_special(TokenId id) const;
  const AddedVocabulary& added_tokens() const { return added_; }

 private:
  struct Scratch;
  static Scratch& scratch_for(uint64_t serial);
  void encode_into(std::string_view text, SpecialTokens special, Scratch& scratch, std::vector<TokenId>& ids) const;
  void encode_segment(std::string_view text, Scratch& scratch, std::vector<TokenId>& ids) const;

  uint64_t serial_ = 0;  // distinguishes tokenizers in the per-thread scratch
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  AddedVocabulary added_;
  Decoder decoder_;
  std::vector<std::string> id_bytes_;  // id -> decoded bytes
  std::vector<uint8_t> id_kind_;       // id -> 0 unknown, 1 model, 2 added, 3 added special
};

}  // namespace kiln
