// UTF-8 decoding with the Unicode "maximal subpart" replacement rule (the one Python's
// errors="replace", Rust's from_utf8_lossy and the WHATWG decoder share), and small helpers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

// Decodes one code point at `pos`. On a well-formed sequence returns it and sets `len` to its
// byte length; otherwise returns kReplacement with `len` = the length of the maximal subpart
// (at least 1). `pos` must be < s.size().
char32_t decode(std::string_view s, size_t pos, size_t* len);

// True when `s` is entirely well-formed UTF-8.
bool is_valid(std::string_view s);

// `s` with every ill-formed maximal subpart replaced by U+FFFD (a copy only when needed).
std::string sanitize(std::string_view s);

// Appends the UTF-8 encoding of `cp` to `out`.
void append(std::string& out, char32_t cp);

// The length of the longest prefix of `s` after which no code point could be completed by more
// bytes: a trailing sequence that is a valid but incomplete prefix is excluded.
size_t settled_prefix_length(std::string_view s);

// Number of code points in well-formed `s`.
size_t length(std::string_view s);

// Python's str.isspace() for one code point.
bool is_python_space(char32_t cp);

// Unicode White_Space (what Oniguruma's and Rust's \s match).
bool is_white_space(char32_t cp);

}  // namespace kiln::utf8
