// Splits template source into text and tag tokens with Jinja2's whitespace rules as HF configures
// them: trim_blocks and lstrip_blocks on, "-" and "+" modifiers, newlines normalised to "\n" and a
// single trailing newline dropped (keep_trailing_newline off).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::jinja {

struct Token {
  enum class Type {
    kText,           // literal output
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,
    kString,         // value holds the decoded string
    kInteger,
    kFloat,
    kOperator,
    kEnd,
  };
  Type type;
  std::string value;
  size_t offset;  // in the normalised source
};

// The source the lexer and error positions refer to: newlines normalised, trailing one dropped.
std::string normalize_template_source(std::string_view source);

// Tokenises normalised source; throws TemplateError (with offset) on a lexical error.
std::vector<Token> tokenize(const std::string& source);

// "line L column C" (1-based; columns count code points) of `offset` in `source`.
std::string describe_position(const std::string& source, size_t offset);

}  // namespace kiln::jinja
