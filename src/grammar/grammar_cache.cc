// The grammar cache: a key holds the kind, the JSON options and the text, so that equal specs
// share one entry; compilation runs without the lock, and a second thread compiling the same
// spec at once keeps the entry the first one stored.
#include "grammar/grammar_cache.h"

#include "grammar/automaton.h"
#include "grammar/gbnf.h"
#include "grammar/regex_grammar.h"
#include "grammar/tool_call_grammar.h"

namespace kiln::grammar {

namespace {

std::string key_of(const GrammarSpec& spec) {
  std::string key = std::to_string(static_cast<int>(spec.kind));
  if (spec.kind == GrammarKind::kJsonSchema || spec.kind == GrammarKind::kAnyJson || spec.kind == GrammarKind::kToolCalls) {
    key.append("/").append(std::to_string(spec.json.max_whitespace)).append("/").append(std::to_string(spec.json.max_digits));
  }
  key += "\n";
  key += spec.text;
  return key;
}

}  // namespace

Result<Grammar> grammar_of(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kJsonSchema: return json_schema_grammar(std::string_view(spec.text), spec.json);
    case GrammarKind::kAnyJson: return any_json_grammar(spec.json);
    case GrammarKind::kRegex: return regex_grammar(spec.text);
    case GrammarKind::kGbnf: return parse_gbnf(spec.text);
    case GrammarKind::kToolCalls: return tool_call_grammar_of_spec(spec.text, spec.json);
  }
  return invalid_argument("unknown grammar kind " + std::to_string(static_cast<int>(spec.kind)));
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity, CompileLimits limits)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(capacity, 1)), limits_(limits) {}

Result<std::shared_ptr<const MaskCache>> GrammarCache::get(const GrammarSpec& spec) {
  const std::string key = key_of(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(key);
    if (it != by_key_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    ++misses_;
  }
  KILN_ASSIGN_OR_RETURN(Grammar g, grammar_of(spec));
  KILN_ASSIGN_OR_RETURN(Automaton a, compile_grammar(g, limits_));
  auto compiled = std::make_shared<const MaskCache>(std::make_shared<const Automaton>(std::move(a)), vocab_);

  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  by_key_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    by_key_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

uint64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

uint64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace kiln::grammar
