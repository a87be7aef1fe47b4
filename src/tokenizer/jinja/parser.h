// Builds the syntax tree of a template from its tokens (lexer.h). Everything outside the
// supported subset is a TemplateError at the offending token.
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace kiln::jinja {

// Parses tokenize(source); throws TemplateError with the offset of the problem.
Body parse_template(const std::vector<Token>& tokens);

}  // namespace kiln::jinja
