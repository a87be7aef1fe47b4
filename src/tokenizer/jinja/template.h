// A parsed Jinja template (the subset chat templates use) that renders as HF's Jinja2 setup does:
// trim_blocks, lstrip_blocks, loop controls, HF's tojson, raise_exception and strftime_now.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace kiln::jinja {

class Template {
 public:
  // Parses `source`; syntax outside the subset is an error naming its line and column.
  static Result<Template> parse(std::string_view source);

  // Renders with these top-level variables; runtime errors (undefined values, type errors,
  // raise_exception) name the line and column where they happened.
  Result<std::string> render(const std::vector<std::pair<std::string, Value>>& variables) const;

 private:
  std::shared_ptr<const std::string> source_;  // normalised, for error positions
  std::shared_ptr<const Body> body_;
};

}  // namespace kiln::jinja
