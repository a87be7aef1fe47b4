// tokenizer.json patterns on core's Regex: their Oniguruma syntax translated to PCRE2 (\s as
// Unicode White_Space), compiled for well-formed UTF-8 with the tokenizer's generous limits.
#pragma once

#include <string>

#include "core/regex.h"
#include "core/status.h"

namespace kiln {

// A tokenizer.json "Regex" pattern; errors name the pattern as written and as translated.
Result<Regex> compile_tokenizer_pattern(const std::string& pattern);
// A tokenizer.json "String" pattern: the string, matched literally.
Result<Regex> compile_tokenizer_literal(const std::string& literal);

// Rewrites Oniguruma/Rust-only syntax into PCRE2 syntax: \s and \S become explicit White_Space
// classes. Exposed for tests.
Result<std::string> translate_pattern(const std::string& pattern);

}  // namespace kiln
