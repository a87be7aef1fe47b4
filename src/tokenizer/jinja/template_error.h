// The error a template raises while parsing or rendering. It is thrown inside the engine and
// turned into a kiln::Status at the public entry points (Template::parse and Template::render),
// which keeps the recursive evaluator free of error plumbing.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln::jinja {

struct TemplateError : std::runtime_error {
  TemplateError(std::string message, size_t offset = kNoOffset)
      : std::runtime_error(message), offset(offset) {}
  static constexpr size_t kNoOffset = static_cast<size_t>(-1);
  size_t offset;  // byte offset in the template source, or kNoOffset until a caller knows it
};

}  // namespace kiln::jinja
