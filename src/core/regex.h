// The project's one regular-expression engine: PCRE2 patterns (UTF-8, Unicode properties, JIT
// where available) whose every match attempt is bounded in steps and memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln {

// Bounds on a pattern and on each match attempt (one find, one full_match, one step of
// for_each_match). Hitting one is an error naming it, never a hang or a stack overflow.
struct RegexLimits {
  size_t max_pattern_bytes = 4096;
  uint32_t match_limit = 1'000'000;  // PCRE2's count of backtracking steps
  uint32_t depth_limit = 10'000;     // nested backtracking points (the interpreter's)
  // The interpreter's backtracking memory; the JIT, which ignores the depth and heap limits,
  // gets a stack of this size instead.
  uint32_t heap_limit_kib = 4096;
};

enum class RegexCase { kSensitive, kInsensitive };

// kAnyBytes: the text may hold invalid UTF-8, which matches nothing. kValidUtf8: the caller
// guarantees well-formed UTF-8 and no check is made (the tokenizer's hot path); other text is
// undefined behaviour there.
enum class RegexText { kAnyBytes, kValidUtf8 };

struct RegexOptions {
  RegexCase case_mode = RegexCase::kSensitive;
  RegexText text = RegexText::kAnyBytes;
  // nullopt: no match context, so PCRE2's built-in limits (10,000,000 steps, a 32 KiB JIT stack)
  // and no pattern cap; for trusted patterns on a hot path, where a context costs 2-3%.
  std::optional<RegexLimits> limits = RegexLimits{};
};

// One match, as byte offsets into the text it was found in.
struct RegexMatch {
  static constexpr size_t kUnset = static_cast<size_t>(-1);
  struct Span {
    size_t begin = kUnset, end = kUnset;
  };
  std::vector<Span> spans;  // [0] the whole match, [i] capture group i (kUnset: it took no part)

  size_t begin() const { return spans[0].begin; }
  size_t end() const { return spans[0].end; }
  // Group i of `text`; nullopt when the group took no part or does not exist.
  std::optional<std::string_view> group(std::string_view text, size_t i) const;
};

class Regex {
 public:
  Regex() = default;  // matches nothing until assigned a compiled pattern

  // Errors (kInvalidArgument) name the pattern and, for syntax, PCRE2's message and offset.
  static Result<Regex> compile(std::string_view pattern, const RegexOptions& options = {});
  // A pattern that matches `text` exactly, every character literal.
  static Result<Regex> literal(std::string_view text, const RegexOptions& options = {});

  // The first match at or after byte `start`, nullopt when there is none, or an error
  // (kResourceExhausted for a limit) naming the pattern, the limit and the text's length.
  Result<std::optional<RegexMatch>> find(std::string_view text, size_t start = 0) const;
  // Whether the pattern matches all of `text` (the interpreter runs it: PCRE2's JIT takes no
  // anchoring at match time).
  Result<bool> full_match(std::string_view text) const;
  // Calls on_match(begin, end) for each leftmost non-overlapping match, left to right; an empty
  // match moves the search on by one character. Stops at the first error and returns it.
  template <typename F>
  Status for_each_match(std::string_view text, F&& on_match) const;

  const std::string& pattern() const;

 private:
  struct Compiled;
  // compile() and literal(): `syntax` is 0 or PCRE2_LITERAL.
  static Result<Regex> build(std::string_view pattern, const RegexOptions& options, uint32_t syntax);
  // One attempt from `start`: PCRE2's return code (>= 0: a match, whose span is set), kept an int
  // so that the tokenizer's loop builds no Result per match.
  int next(std::string_view text, size_t start, size_t* begin, size_t* end) const;
  // The Status of a failed attempt (a code below 0 other than no-match).
  Status error(int rc, size_t text_bytes) const;
  static constexpr int kNoMatch = -1;  // PCRE2_ERROR_NOMATCH

  std::shared_ptr<const Compiled> compiled_;
};

template <typename F>
Status Regex::for_each_match(std::string_view text, F&& on_match) const {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t b = 0, e = 0;
    const int rc = next(text, pos, &b, &e);
    if (rc == kNoMatch) return Status();
    if (rc < 0) return error(rc, text.size());
    on_match(b, e);
    if (e > b) {
      pos = e;
      continue;
    }
    if (e >= text.size()) return Status();
    pos = e + 1;
    while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
  }
  return Status();
}

}  // namespace kiln
