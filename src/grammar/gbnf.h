// GBNF, the grammar text llama.cpp reads: `name ::= alternatives` rules, "literals" and
// [character classes] with escapes, `.`, groups, the postfix operators * + ? {m} {m,} {m,n} {,n},
// and # comments. The rule named `root` is the grammar's root.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kiln::grammar {

// Errors (kInvalidArgument) start with "gbnf LINE:COLUMN:" where the fault lies.
Result<Grammar> parse_gbnf(std::string_view text);

}  // namespace kiln::grammar
