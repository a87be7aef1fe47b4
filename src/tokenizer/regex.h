// A compiled PCRE2 pattern (UTF, Unicode properties, JIT) that accepts the Oniguruma syntax of
// tokenizer.json patterns, with Oniguruma's meaning of \s (Unicode White_Space).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

struct pcre2_real_code_8;

namespace kiln {

class Regex {
 public:
  // Compiles `pattern`; errors name the pattern and the offset PCRE2 stopped at.
  static Result<Regex> compile(const std::string& pattern);
  // A pattern that matches `literal` exactly.
  static Result<Regex> literal(const std::string& literal);

  // Calls on_match(begin, end) for each leftmost non-overlapping match in well-formed UTF-8
  // `text`, left to right. An empty match advances the search by one code point.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) const {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t b, e;
      if (!find(text, pos, &b, &e)) return;
      on_match(b, e);
      if (e > b) {
        pos = e;
      } else {
        if (e >= text.size()) return;
        pos = e + 1;
        while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
  }

  // The first match at or after `start`; false when there is none.
  bool find(std::string_view text, size_t start, size_t* begin, size_t* end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  std::string pattern_;
  std::shared_ptr<pcre2_real_code_8> code_;
};

// Rewrites Oniguruma/Rust-only syntax into PCRE2 syntax: \s and \S become explicit White_Space
// classes. Exposed for tests.
Result<std::string> translate_pattern(const std::string& pattern);

}  // namespace kiln
