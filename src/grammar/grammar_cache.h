// Compiled grammars by what they were compiled from: a request that repeats a JSON schema, a
// regular expression or a GBNF text gets the same automaton and the same token-mask cache
// (filled by every earlier request), least recently used first out.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/mask_cache.h"

namespace kiln::grammar {

enum class GrammarKind {
  kJsonSchema,  // text: a JSON Schema document
  kAnyJson,     // text unused: any JSON value
  kRegex,       // text: a regular expression the whole output must match
  kGbnf,        // text: a GBNF grammar
  kToolCalls,   // text: tool_call_spec_text (tool_call_grammar.h)
};

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonSchema;
  std::string text;
  JsonSchemaOptions json;  // for kJsonSchema, kAnyJson and kToolCalls
};

// The grammar a spec denotes, through its front end (errors as the front end gives them).
Result<Grammar> grammar_of(const GrammarSpec& spec);

class GrammarCache {
 public:
  // `limits` bound every compilation (a server's requests use smaller ones than the default, so a
  // hostile grammar is refused in a fraction of a second).
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity, CompileLimits limits = {});

  // The compiled grammar of `spec` and its token masks: compiled on first request (outside the
  // cache's lock), then shared. Errors are the compilers'; they are not cached.
  Result<std::shared_ptr<const MaskCache>> get(const GrammarSpec& spec);

  size_t size() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const MaskCache>>;

  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  CompileLimits limits_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::map<std::string, std::list<Entry>::iterator> by_key_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace kiln::grammar
