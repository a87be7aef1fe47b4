// The text of a turn that must call tools, in a chat template's tool-call syntax, with each
// function's arguments constrained by its parameters' JSON Schema:
//   kJson (Qwen3):   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//   kXml (Qwen3.5):  <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// Several calls (when allowed) follow one another separated by a newline.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace kiln::grammar {

enum class ToolCallSyntax { kJson, kXml };

struct ToolCallFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema of an object; null: no arguments
};

inline constexpr int kMaxParallelToolCalls = 16;

// One call of any of `functions` (at least one), or 1..kMaxParallelToolCalls calls when
// `parallel`. In the XML syntax a parameter whose declared type is (or includes) "string" is raw
// text without '<' (its enum or const as literals; minLength and maxLength count characters;
// pattern and format are refused); any other parameter is its schema's JSON; parameters come in
// the schema's order, the required ones always. Errors name the JSON pointer inside the function's
// parameters, after "<name>: ".
Result<Grammar> tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolCallFunction>& functions, bool parallel,
                                  const JsonSchemaOptions& options = {});

// The spec text GrammarKind::kToolCalls reads: {"syntax": "json"|"xml", "parallel": bool,
// "functions": [{"name", "parameters"}]}, and its reading.
std::string tool_call_spec_text(ToolCallSyntax syntax, const std::vector<ToolCallFunction>& functions, bool parallel);
Result<Grammar> tool_call_grammar_of_spec(std::string_view text, const JsonSchemaOptions& options);

}  // namespace kiln::grammar
