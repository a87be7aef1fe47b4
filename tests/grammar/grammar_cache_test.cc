// The grammar cache: a repeated spec gets the very same compiled grammar (and its filled token
// masks); the least recently used entry leaves first; errors are returned, not kept.
#include <gtest/gtest.h>

#include "grammar/grammar_cache.h"

namespace kiln::grammar {
namespace {

std::shared_ptr<const TokenVocabulary> bytes_vocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  return std::make_shared<const TokenVocabulary>(TokenVocabulary::create(bytes, 256, {}).value());
}

TEST(GrammarCache, ARepeatedSpecSharesOneCompiledGrammar) {
  GrammarCache cache(bytes_vocabulary(), 4);
  const GrammarSpec spec{GrammarKind::kJsonSchema, R"({"type": "boolean"})", {}};
  auto first = cache.get(spec);
  auto again = cache.get(spec);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->get(), again->get());
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
}

TEST(GrammarCache, SpecsDifferingInKindOrOptionsAreDifferentEntries) {
  GrammarCache cache(bytes_vocabulary(), 8);
  GrammarSpec compact{GrammarKind::kJsonSchema, R"({"type": "array"})", {}};
  compact.json.max_whitespace = 0;
  const GrammarSpec spaced{GrammarKind::kJsonSchema, R"({"type": "array"})", {}};
  const GrammarSpec regex{GrammarKind::kRegex, "a|b", {}};
  const GrammarSpec gbnf{GrammarKind::kGbnf, "root ::= \"a\" | \"b\"", {}};
  auto a = cache.get(compact), b = cache.get(spaced), c = cache.get(regex), d = cache.get(gbnf);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_NE(a->get(), b->get());
  EXPECT_NE(c->get(), d->get());
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.misses(), 4u);
}

TEST(GrammarCache, TheLeastRecentlyUsedEntryLeavesFirst) {
  GrammarCache cache(bytes_vocabulary(), 2);
  const GrammarSpec x{GrammarKind::kRegex, "x", {}}, y{GrammarKind::kRegex, "y", {}}, z{GrammarKind::kRegex, "z", {}};
  auto first_x = cache.get(x);
  ASSERT_TRUE(first_x.ok());
  ASSERT_TRUE(cache.get(y).ok());
  ASSERT_TRUE(cache.get(x).ok());  // x is now the most recent
  ASSERT_TRUE(cache.get(z).ok());  // y leaves
  EXPECT_EQ(cache.size(), 2u);
  auto x_again = cache.get(x);
  ASSERT_TRUE(x_again.ok());
  EXPECT_EQ(x_again->get(), first_x->get());
  const uint64_t misses = cache.misses();
  ASSERT_TRUE(cache.get(y).ok());
  EXPECT_EQ(cache.misses(), misses + 1);
}

TEST(GrammarCache, ErrorsAreReturnedAndNotKept) {
  GrammarCache cache(bytes_vocabulary(), 2);
  auto bad = cache.get(GrammarSpec{GrammarKind::kGbnf, "root ::= missing", {}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "gbnf 1:10: rule 'missing' is used but never defined");
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace kiln::grammar
