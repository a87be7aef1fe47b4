// Regular expressions as grammars: the regular subset of the usual syntax (literals, escapes,
// classes, `.`, groups, alternation, greedy or lazy quantifiers including {m,n}). What is not
// regular (backreferences, lookarounds, word boundaries) is refused by name.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/codepoints.h"
#include "grammar/grammar.h"

namespace kiln::grammar {

enum class RegexScope {
  kWhole,   // the text must match the pattern from end to end (anchors ^ $ implied, and allowed)
  kSearch,  // the text must contain a match (JSON Schema's "pattern"): an end without its anchor
            // takes any characters
};

// The pattern's language as an expression of `g`, each character written in `encoding`.
// Errors (kInvalidArgument) name the pattern and the offset of the construct at fault.
Result<ExprId> regex_expr(Grammar& g, std::string_view pattern, CharEncoding encoding, RegexScope scope);

// A grammar whose root matches the whole text against `pattern` (UTF-8 text).
Result<Grammar> regex_grammar(std::string_view pattern);

}  // namespace kiln::grammar
