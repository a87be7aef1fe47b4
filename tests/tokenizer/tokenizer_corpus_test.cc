// Parity with HF tokenizers 0.23.2 (tools/tokenizer/oracle_hf_tokenizers.js) on the committed
// corpus: exact ids for every string, and decode(encode(s)) == NFC(s) (NFC by the JS runtime's ICU).
#include <gtest/gtest.h>

#include "qwen3_fixture.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kiln {
namespace {

using testing::corpus;
using testing::fixture_path;
using testing::qwen3;
using testing::read_jsonl;

std::string show(const std::vector<TokenId>& ids) {
  return nlohmann::json(ids).dump();
}

TEST(TokenizerCorpus, CorpusIsLargeAndMatchesExpectations) {
  const auto texts = corpus();
  const auto expected = read_jsonl(fixture_path("corpus_expected.jsonl"));
  EXPECT_GE(texts.size(), 2000u);
  EXPECT_EQ(texts.size(), expected.size());
}

TEST(TokenizerCorpus, EncodeMatchesOracleOnEveryString) {
  const Tokenizer* tok = qwen3();
  ASSERT_NE(tok, nullptr);
  const auto texts = corpus();
  const auto expected = read_jsonl(fixture_path("corpus_expected.jsonl"));
  ASSERT_EQ(texts.size(), expected.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto want = expected[i]["ids"].get<std::vector<TokenId>>();
    const auto got = tok->encode(texts[i]);
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << "corpus line " << i + 1 << " " << nlohmann::json(utf8::sanitize(texts[i])).dump()
                    << "\n  want " << show(want) << "\n  got  " << show(got);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << texts.size() << " strings";
}

TEST(TokenizerCorpus, DecodeOfEncodeIsTheNormalizedInput) {
  const Tokenizer* tok = qwen3();
  ASSERT_NE(tok, nullptr);
  const auto texts = corpus();
  const auto expected = read_jsonl(fixture_path("corpus_expected.jsonl"));
  ASSERT_EQ(texts.size(), expected.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto decoded = tok->decode(tok->encode(texts[i]));
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    const std::string want = expected[i]["normalized"];
    if (decoded.value() != want && ++mismatches <= 10) {
      ADD_FAILURE() << "corpus line " << i + 1 << ": decode gives " << nlohmann::json(decoded.value()).dump()
                    << ", want " << nlohmann::json(want).dump();
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(TokenizerCorpus, BatchedEncodeEqualsOneByOne) {
  const Tokenizer* tok = qwen3();
  ASSERT_NE(tok, nullptr);
  const auto texts = corpus();
  const auto batched = tok->encode_batch(texts);
  ASSERT_EQ(batched.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) ASSERT_EQ(batched[i], tok->encode(texts[i])) << "corpus line " << i + 1;
}

}  // namespace
}  // namespace kiln
