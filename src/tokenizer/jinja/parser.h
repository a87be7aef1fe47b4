// Builds the syntax tree of a template from its tokens (lexer.h). Everything outside the
// supported subset is a TemplateError at the offending token.
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace kiln::jinja {

// How deep a template may nest: brackets, operators chained or nested, filters, attribute and call
// chains, and blocks, each a level. Deeper templates are refused, so that neither the parser, the
// interpreter nor the tree's destructor recurses past a thread's stack (chat templates nest < 10).
inline constexpr int kMaxTemplateNesting = 256;

// Parses tokenize(source); throws TemplateError with the offset of the problem.
Body parse_template(const std::vector<Token>& tokens);

}  // namespace kiln::jinja
