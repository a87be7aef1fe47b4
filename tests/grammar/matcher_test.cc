// The matcher and its token masks: a mask holds exactly the tokens whose bytes the matcher
// accepts (checked token by token against the whole vocabulary), stop tokens exactly where the
// text is complete, and nothing for ids that write no bytes.
#include <gtest/gtest.h>

#include <thread>

#include "core/thread_pool.h"
#include "grammar/json_schema.h"
#include "grammar/regex_grammar.h"
#include "grammar_test_util.h"

namespace kiln::grammar {
namespace {

using testing::gbnf;
using testing::qwen3_vocabulary;
using testing::set_ids;

// A small vocabulary with tokens that end inside rules, span several rules, split UTF-8
// characters and repeat bytes (ids 1..29), then every printable ASCII byte (ids 30..124, so that
// no text is a dead end); id 0 stops, ids 125..129 write nothing.
std::shared_ptr<const TokenVocabulary> small_vocabulary() {
  std::vector<std::string> bytes = {"",     "a",   "b",  "ab", "abc", "\"",  "\",", "\"}", "{",    "}",
                                    "{\"",  ",",   " ",  "  ", "1",   "12",  "0",   "-",  "true", "tr",
                                    "\xC3", "\xA9", "é", "éa", ":",   "\":", "[",   "]",  "],",   "x\""};
  for (char c = 0x20; c < 0x7F; ++c) bytes.push_back(std::string(1, c));
  auto v = TokenVocabulary::create(bytes, 130, {0});
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  return std::make_shared<const TokenVocabulary>(std::move(v).value());
}

// Checks the mask at the matcher's position against accepts() of every id.
void expect_mask_exact(Matcher& m, const TokenVocabulary& vocab, const std::string& where) {
  std::vector<uint32_t> words(vocab.mask_words());
  ASSERT_TRUE(m.fill_mask(words).ok());
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
    const bool allowed = has_bit(words.data(), id);
    bool expected = false;
    if (vocab.is_stop(id)) {
      expected = m.is_complete();
    } else if (!vocab.bytes(id).empty()) {
      expected = m.accepts(vocab.bytes(id));
    }
    if (allowed != expected) {
      ADD_FAILURE() << "token " << id << " '" << vocab.bytes(id) << "' is " << (allowed ? "allowed" : "refused")
                    << " by the mask but " << (expected ? "accepted" : "refused") << " by the matcher after '" << where << "'";
      return;
    }
  }
}

// Walks seeded random tokens from the masks, checking every mask on the way.
void check_masks_along_walks(const std::shared_ptr<const Automaton>& a, const std::shared_ptr<const TokenVocabulary>& vocab,
                             int walks, int steps) {
  auto masks = std::make_shared<const MaskCache>(a, vocab);
  std::mt19937_64 rng(7);
  std::vector<uint32_t> words(vocab->mask_words());
  for (int w = 0; w < walks; ++w) {
    Matcher m(masks);
    std::string text;
    for (int s = 0; s < steps && !m.is_stopped(); ++s) {
      expect_mask_exact(m, *vocab, text);
      if (::testing::Test::HasFailure()) return;
      ASSERT_TRUE(m.fill_mask(words).ok());
      const auto ids = set_ids(words);
      ASSERT_FALSE(ids.empty()) << "nothing allowed after " << text;
      const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      ASSERT_TRUE(m.accept_token(id).ok());
      text += vocab->bytes(id);
    }
  }
}

const char* kJsonishGbnf = R"(
root   ::= object
value  ::= object | array | string | number | "true" | "false"
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}"
array  ::= "[" ws ( value ( "," ws value )* )? "]"
string ::= "\"" [a-cé]* "\""
number ::= "-"? [0-9]+
ws     ::= " "?
)";

TEST(TokenMask, EqualsTokenByTokenAcceptanceOnASmallVocabulary) {
  check_masks_along_walks(gbnf(kJsonishGbnf), small_vocabulary(), 40, 30);
}

TEST(TokenMask, EqualsTokenByTokenAcceptanceOnTheQwen3Vocabulary) {
  auto vocab = qwen3_vocabulary();
  ASSERT_TRUE(vocab);
  {
    SCOPED_TRACE("GBNF");
    check_masks_along_walks(gbnf(kJsonishGbnf), vocab, 3, 12);
  }
  {
    SCOPED_TRACE("JSON Schema");
    const char* schema = R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "tags": {"type": "array", "items": {"enum": ["x", "y z"]}, "maxItems": 3},
        "age": {"type": "integer", "minimum": 0, "maximum": 150}},
      "required": ["name"]})";
    check_masks_along_walks(testing::compile_or_die(json_schema_grammar(std::string_view(schema))), vocab, 3, 15);
  }
  {
    SCOPED_TRACE("regular expression");
    check_masks_along_walks(testing::compile_or_die(regex_grammar("(ab|c[0-9]{2,4})+ ?[xyz]")), vocab, 3, 10);
  }
}

TEST(TokenMask, IdsWithoutBytesAreNeverAllowed) {
  auto vocab = qwen3_vocabulary();
  ASSERT_TRUE(vocab);
  auto masks = std::make_shared<const MaskCache>(gbnf(R"(root ::= [^"]*)"), vocab);
  Matcher m(masks);
  std::vector<uint32_t> words(vocab->mask_words());
  ASSERT_EQ(words.size(), testing::kModelVocab / 32);
  ASSERT_TRUE(m.fill_mask(words).ok());
  size_t allowed = 0;
  for (int32_t id : set_ids(words)) {
    ++allowed;
    EXPECT_TRUE(!vocab->bytes(id).empty() || vocab->is_stop(id)) << "id " << id << " writes nothing";
  }
  EXPECT_GT(allowed, 100000u);  // nearly every text token fits [^"]*
  for (size_t id = 151669; id < testing::kModelVocab; ++id) EXPECT_FALSE(has_bit(words.data(), static_cast<int32_t>(id)));
}

TEST(TokenMask, StopTokensAreAllowedExactlyWhereTheTextIsComplete) {
  auto vocab = small_vocabulary();
  auto masks = std::make_shared<const MaskCache>(gbnf(R"(root ::= "ab" "c"?)"), vocab);
  Matcher m(masks);
  std::vector<uint32_t> words(vocab->mask_words());
  ASSERT_TRUE(m.fill_mask(words).ok());
  EXPECT_EQ(set_ids(words), (std::vector<int32_t>{1, 3, 4, 30 + 'a' - 0x20}));  // a, ab, abc and "a" again
  ASSERT_TRUE(m.accept_token(3).ok());
  ASSERT_TRUE(m.fill_mask(words).ok());
  EXPECT_EQ(set_ids(words), (std::vector<int32_t>{0, 30 + 'c' - 0x20}));  // stop, or "c"
  ASSERT_TRUE(m.accept_token(0).ok());
  EXPECT_TRUE(m.is_stopped());
  ASSERT_TRUE(m.fill_mask(words).ok());
  EXPECT_TRUE(set_ids(words).empty());
}

TEST(Matcher, RefusedTokensAreErrorsNamingTheId) {
  auto vocab = small_vocabulary();
  Matcher m(std::make_shared<const MaskCache>(gbnf(R"(root ::= "ab")"), vocab));
  EXPECT_EQ(m.accept_token(2).message(), "token id 2 is not allowed by the grammar here");
  EXPECT_EQ(m.accept_token(0).message(), "stop token id 0 comes before the grammar's text is complete");
  EXPECT_EQ(m.accept_token(127).message(), "token id 127 writes no text a grammar can allow");
  EXPECT_EQ(m.accept_token(130).message(), "token id 130 is outside the vocabulary (size 130)");
  ASSERT_TRUE(m.accept_token(3).ok());
  EXPECT_TRUE(m.is_complete());
}

TEST(Matcher, RefusedBytesLeaveThePositionUnchanged) {
  Matcher m(gbnf(R"(root ::= "abc" | "abd")"));
  ASSERT_TRUE(m.advance("ab"));
  EXPECT_FALSE(m.advance("cx"));
  EXPECT_FALSE(m.accepts("e"));
  EXPECT_TRUE(m.advance("d"));
  EXPECT_TRUE(m.is_complete());
  m.reset();
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.accepts("abc"));
}

TEST(TokenMask, RowsFilledInParallelEqualEachRowAlone) {
  auto vocab = qwen3_vocabulary();
  ASSERT_TRUE(vocab);
  auto masks = std::make_shared<const MaskCache>(gbnf(kJsonishGbnf), vocab);
  const std::vector<std::string> prefixes = {"", "{", "{\"ab\":", "{\"a\": [", "{\"c\":tr", "{\"b\":-1", "{\"a\":\"é"};
  std::vector<std::unique_ptr<Matcher>> rows;
  std::vector<Matcher*> ptrs;
  for (const std::string& p : prefixes) {
    rows.push_back(std::make_unique<Matcher>(masks));
    ASSERT_TRUE(rows.back()->advance(p)) << p;
    ptrs.push_back(rows.back().get());
  }
  const size_t words = vocab->mask_words();
  std::vector<uint32_t> together(words * rows.size());
  ThreadPool pool(4);
  ASSERT_TRUE(fill_masks(ptrs, together, pool).ok());  // every row's entries computed now, in parallel
  // Again with the rows' entries cached, but row 0 moved on to where row 1 stands.
  std::vector<uint32_t> again(together.size());
  ASSERT_TRUE(rows[0]->advance("{"));
  ASSERT_TRUE(fill_masks(ptrs, again, pool).ok());
  EXPECT_TRUE(std::equal(again.begin(), again.begin() + words, together.begin() + words));
  EXPECT_TRUE(std::equal(again.begin() + words, again.end(), together.begin() + words));
  for (size_t r = 0; r < rows.size(); ++r) {
    // Each row alone, on a fresh matcher with a fresh cache.
    Matcher alone(std::make_shared<const MaskCache>(gbnf(kJsonishGbnf), vocab));
    ASSERT_TRUE(alone.advance(prefixes[r]));
    std::vector<uint32_t> mask(words);
    ASSERT_TRUE(alone.fill_mask(mask).ok());
    EXPECT_TRUE(std::equal(mask.begin(), mask.end(), together.begin() + r * words)) << "row " << r << " after '" << prefixes[r] << "'";
  }
}

TEST(TokenMask, AFullyFilledCacheGivesTheSameMasksAsOneFilledOnDemand) {
  auto vocab = small_vocabulary();
  auto a = gbnf(kJsonishGbnf);
  auto lazy = std::make_shared<const MaskCache>(a, vocab);
  auto full = std::make_shared<const MaskCache>(a, vocab);
  ThreadPool pool(2);
  full->fill_all(pool);
  EXPECT_GT(full->filled(), 0u);
  Matcher x(lazy), y(full);
  std::vector<uint32_t> wx(vocab->mask_words()), wy(vocab->mask_words());
  for (const char* step : {"{", "\"a", "b\"", ":", " [", "1", ",", "true"}) {
    ASSERT_TRUE(x.advance(step) && y.advance(step)) << step;
    ASSERT_TRUE(x.fill_mask(wx).ok() && y.fill_mask(wy).ok());
    EXPECT_EQ(wx, wy) << "after " << step;
  }
}

TEST(TokenVocabulary, StopIdsOutsideTheVocabularyAreErrors) {
  auto v = TokenVocabulary::create({"a"}, 4, {9});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "stop token id 9 is outside the vocabulary (size 4)");
}

TEST(TokenVocabulary, TrieNodesCoverExactlyTheTokensWithTheirPrefix) {
  auto vocab = small_vocabulary();
  const auto& trie = vocab->trie();
  std::vector<std::string> prefix(vocab->max_token_bytes() + 1);
  for (const auto& node : trie) {
    prefix[node.depth] = prefix[node.depth - 1] + static_cast<char>(node.byte);
    const std::string& p = prefix[node.depth];
    for (int32_t pos = 0; pos < static_cast<int32_t>(vocab->token_count()); ++pos) {
      const std::string_view t = vocab->sorted_bytes(pos);
      const bool inside = pos >= node.first && pos < node.end;
      EXPECT_EQ(inside, t.substr(0, p.size()) == p) << "node '" << p << "', token '" << t << "'";
      const bool ends = pos >= node.first && pos < node.first + node.ends;
      EXPECT_EQ(ends, t == p) << "node '" << p << "', token '" << t << "'";
    }
  }
}

}  // namespace
}  // namespace kiln::grammar
