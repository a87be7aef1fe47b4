// Sets of Unicode code points (what character classes denote) and their lowering to byte-level
// expressions: plain UTF-8, or the canonical form of a character inside a JSON string; and the
// reading of code points from a grammar's source text, which the GBNF and regex parsers share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace kiln::grammar {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

class CodepointSet {
 public:
  static CodepointSet of(uint32_t c) { return range(c, c); }
  static CodepointSet range(uint32_t lo, uint32_t hi);
  static CodepointSet any() { return range(0, kMaxCodepoint); }

  void add(uint32_t lo, uint32_t hi);
  void add(uint32_t c) { add(c, c); }
  void add_all(const CodepointSet& other);
  CodepointSet complement() const;  // within [0, kMaxCodepoint]
  CodepointSet minus(const CodepointSet& other) const;
  bool contains(uint32_t c) const;
  bool empty() const { return ranges_.empty(); }
  // Sorted, disjoint, not adjacent.
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

enum class CharEncoding {
  kUtf8,        // the code point's UTF-8 bytes
  kJsonString,  // as a JSON serialiser writes it inside a string: UTF-8, except '"' and '\' and
                // the controls below U+0020, escaped (\b \t \n \f \r, else \u00xx in lowercase)
};

// One code point of `set` in `encoding`. Surrogates (U+D800..U+DFFF) are never matched: UTF-8
// cannot carry them. An empty set gives the empty language.
ExprId encode_chars(Grammar& g, const CodepointSet& set, CharEncoding encoding);

// Appends code point `c` in `encoding` (the one form encode_chars accepts for it).
void append_encoded(uint32_t c, CharEncoding encoding, std::string& out);

// What the grammar parsers read from their source text: the value of the `digits` (at most 8)
// hex digits at text[pos], nothing when fewer than that many follow.
std::optional<uint32_t> read_hex_digits(std::string_view text, size_t pos, size_t digits);

// The UTF-8 character at text[pos] (pos < text.size()), its byte length in `len`; nothing when
// the bytes at pos are not valid UTF-8 (a U+FFFD written in the text is valid).
std::optional<uint32_t> read_utf8_char(std::string_view text, size_t pos, size_t* len);

}  // namespace kiln::grammar
