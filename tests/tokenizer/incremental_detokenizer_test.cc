// The streaming detokeniser against full decode: for every prefix of every corpus string, text
// emitted so far plus what finish() would add equals decode(prefix), and emitted text is always a
// prefix of the final decode (nothing emitted is ever taken back).
#include <gtest/gtest.h>

#include "qwen3_fixture.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/utf8.h"

namespace kiln {
namespace {

using testing::corpus;
using testing::qwen3;

void check_every_prefix(const Tokenizer& tok, const std::vector<TokenId>& ids, SpecialTokenOutput special,
                        size_t line) {
  const std::string full = tok.decode(ids, special).value();
  IncrementalDetokenizer detok(tok, special);
  std::string emitted;
  for (size_t k = 1; k <= ids.size(); ++k) {
    auto piece = detok.push(ids[k - 1]);
    ASSERT_TRUE(piece.ok()) << piece.status().to_string();
    ASSERT_TRUE(utf8::is_valid(piece.value()));
    emitted += piece.value();
    const std::string prefix_decode = tok.decode(std::span(ids).first(k), special).value();
    ASSERT_EQ(emitted + detok.pending_text(), prefix_decode) << "corpus line " << line << ", prefix " << k;
    ASSERT_EQ(full.compare(0, emitted.size(), emitted), 0) << "corpus line " << line << ", prefix " << k;
  }
  emitted += detok.finish();
  ASSERT_EQ(emitted, full) << "corpus line " << line;
}

TEST(IncrementalDetokenizer, EveryPrefixOfEveryCorpusStringMatchesFullDecode) {
  const Tokenizer* tok = qwen3();
  ASSERT_NE(tok, nullptr);
  const auto texts = corpus();
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = tok->encode(texts[i]);
    check_every_prefix(*tok, ids, SpecialTokenOutput::kKeep, i + 1);
    check_every_prefix(*tok, ids, SpecialTokenOutput::kSkip, i + 1);
  }
}

TEST(IncrementalDetokenizer, HoldsBackASplitCharacterUntilItCompletes) {
  const Tokenizer* tok = qwen3();
  ASSERT_NE(tok, nullptr);
  // Byte-level tokens for the four bytes of U+1F9C3 (a rare emoji the vocabulary splits).
  const auto ids = tok->encode("\xF0\x9F\xA7\x83");
  ASSERT_GT(ids.size(), 1u) << "expected the emoji to span several tokens";
  IncrementalDetokenizer detok(*tok);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(detok.push(ids[i]).value(), "");
  EXPECT_EQ(detok.push(ids.back()).value(), "\xF0\x9F\xA7\x83");
  // Full decode of a lone partial token shows U+FFFD, as the tokenizers library does.
  EXPECT_EQ(tok->decode(std::span(ids).first(1)).value(), "\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizer, UnknownIdIsAnErrorNamingIt) {
  const Tokenizer* tok = qwen3();
  ASSERT_NE(tok, nullptr);
  IncrementalDetokenizer detok(*tok);
  auto r = detok.push(999999);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("999999"), std::string::npos);
}

}  // namespace
}  // namespace kiln
