// Decoding replaces each maximal ill-formed subpart independently, so the byte stream can be cut
// anywhere that no sequence is still open: emitting the settled prefix and keeping the rest gives
// the same text as decoding everything at once.
#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace kiln {

Result<std::string> IncrementalDetokenizer::push(TokenId id) {
  const size_t before = pending_.size();
  KILN_RETURN_IF_ERROR(tokenizer_->append_token_bytes(id, special_, first_, pending_));
  if (!(special_ == SpecialTokenOutput::kSkip && tokenizer_->is_special(id))) first_ = false;
  if (pending_.size() == before) return std::string();
  const size_t settled = utf8::settled_prefix_length(pending_);
  std::string text = utf8::sanitize(std::string_view(pending_).substr(0, settled));
  pending_.erase(0, settled);
  return text;
}

std::string IncrementalDetokenizer::pending_text() const { return utf8::sanitize(pending_); }

std::string IncrementalDetokenizer::finish() {
  std::string text = utf8::sanitize(pending_);
  pending_.clear();
  first_ = true;
  return text;
}

}  // namespace kiln
