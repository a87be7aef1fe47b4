// Translation of tokenizer.json's Oniguruma patterns, and the options every tokenizer pattern
// compiles with.
#include "tokenizer/regex.h"

namespace kiln {
namespace {

// Unicode White_Space, as a class body (without brackets).
constexpr const char* kWhiteSpaceBody =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

// The tokenizer's patterns come with the model and run on text the tokenizer has made
// well-formed UTF-8. Limits off: a match context made the pre-tokenizer's loop over the test
// corpus 2-3% slower (2.30 -> 2.36 ms); PCRE2's built-in limits still stop a runaway pattern.
RegexOptions tokenizer_options() {
  RegexOptions o;
  o.text = RegexText::kValidUtf8;
  o.limits = std::nullopt;
  return o;
}

}  // namespace

Result<std::string> translate_pattern(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpaceBody) : "[" + std::string(kWhiteSpaceBody) + "]";
      } else if (n == 'S') {
        if (in_class) return unsupported("regex \"" + pattern + "\": \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpaceBody) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == '[' && in_class && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      return unsupported("regex \"" + pattern + "\": POSIX classes and nested classes are not supported");
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Result<Regex> compile_tokenizer_pattern(const std::string& pattern) {
  KILN_ASSIGN_OR_RETURN(std::string translated, translate_pattern(pattern));
  Result<Regex> r = Regex::compile(translated, tokenizer_options());
  if (!r.ok()) return format_error("regex \"" + pattern + "\" as PCRE2: " + r.status().message());
  return r;
}

Result<Regex> compile_tokenizer_literal(const std::string& literal) {
  return Regex::literal(literal, tokenizer_options());
}

}  // namespace kiln
