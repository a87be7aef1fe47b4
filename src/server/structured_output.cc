#include "server/structured_output.h"

#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace kiln {

namespace {

class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const grammar::MaskCache> g) : matcher_(std::move(g)) {}
  Status fill_mask(std::span<uint32_t> words) override { return matcher_.fill_mask(words); }
  Status accept(int32_t token) override { return matcher_.accept_token(token); }
  bool mask_is_cheap() const override { return matcher_.mask_is_cached(); }

 private:
  grammar::Matcher matcher_;
};

}  // namespace

StructuredOutputs::StructuredOutputs(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids)
    : tokenizer_(tokenizer), vocab_size_(vocab_size), stop_ids_(std::move(stop_ids)) {}

Result<grammar::GrammarCache*> StructuredOutputs::cache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cache_) {
    KILN_ASSIGN_OR_RETURN(grammar::TokenVocabulary v, grammar::TokenVocabulary::from_tokenizer(
                                                          tokenizer_, static_cast<size_t>(vocab_size_), stop_ids_));
    cache_ = std::make_unique<grammar::GrammarCache>(std::make_shared<const grammar::TokenVocabulary>(std::move(v)), 64,
                                                     kRequestCompileLimits);
  }
  return cache_.get();
}

Result<std::shared_ptr<const grammar::MaskCache>> StructuredOutputs::compile(const grammar::GrammarSpec& spec) {
  KILN_ASSIGN_OR_RETURN(grammar::GrammarCache * c, cache());
  return c->get(spec);
}

std::shared_ptr<TokenConstraint> StructuredOutputs::constraint(std::shared_ptr<const grammar::MaskCache> grammar) {
  return std::make_shared<GrammarConstraint>(std::move(grammar));
}

std::optional<grammar::ToolCallSyntax> tool_call_syntax_of(std::string_view source) {
  if (source.find("<function=") != std::string_view::npos) return grammar::ToolCallSyntax::kXml;
  if (source.find("<tool_call>") != std::string_view::npos) return grammar::ToolCallSyntax::kJson;
  return std::nullopt;
}

ConstraintStart constraint_start(bool prompt_opens_reasoning, bool thinking, int32_t open_id, int32_t close_id) {
  if (prompt_opens_reasoning) return {close_id, -1};
  if (thinking && open_id >= 0 && close_id >= 0) return {close_id, open_id};
  return {};
}

}  // namespace kiln
