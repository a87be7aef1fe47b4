// The boundary where the engine's TemplateError becomes a kiln::Status.
#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/template_error.h"

namespace kiln::jinja {
namespace {

std::string located(const std::string& source, const TemplateError& e) {
  if (e.offset == TemplateError::kNoOffset) return e.what();
  return describe_position(source, e.offset) + ": " + e.what();
}

}  // namespace

Result<Template> Template::parse(std::string_view source) {
  auto normalized = std::make_shared<const std::string>(normalize_template_source(source));
  try {
    auto body = std::make_shared<const Body>(parse_template(tokenize(*normalized)));
    Template t;
    t.source_ = std::move(normalized);
    t.body_ = std::move(body);
    return t;
  } catch (const TemplateError& e) {
    return format_error("template syntax error at " + located(*normalized, e));
  }
}

Result<std::string> Template::render(const std::vector<std::pair<std::string, Value>>& variables) const {
  auto globals = std::make_shared<Frame>();
  add_globals(*globals);
  auto top = std::make_shared<Frame>();
  top->parent = globals;
  for (const auto& [name, value] : variables) top->set(name, value);
  Interpreter interpreter(top);
  std::string out;
  try {
    interpreter.render(*body_, out);
  } catch (const TemplateError& e) {
    return invalid_argument("template error at " + located(*source_, e));
  }
  return out;
}

}  // namespace kiln::jinja
