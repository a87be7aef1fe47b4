// Code point sets and their lowering: a range of code points becomes a few sequences of byte
// ranges by splitting it where the UTF-8 encoding's length or a continuation byte's span changes.
#include "grammar/codepoints.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace kiln::grammar {

namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int utf8_length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void append_utf8(uint32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// [lo, hi] share an encoded length; splits it until every piece is a product of byte ranges.
void same_length_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      same_length_sequences(lo, lo | m, out);
      same_length_sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      same_length_sequences(lo, (hi & ~m) - 1, out);
      same_length_sequences(hi & ~m, hi, out);
      return;
    }
  }
  std::string a, b;
  append_utf8(lo, a);
  append_utf8(hi, b);
  ByteRanges seq;
  for (size_t j = 0; j < a.size(); ++j) seq.emplace_back(static_cast<uint8_t>(a[j]), static_cast<uint8_t>(b[j]));
  out.push_back(std::move(seq));
}

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
  for (uint32_t end : kLengthEnds) {
    if (lo > hi) return;
    if (lo > end) continue;
    const uint32_t piece_hi = std::min(hi, end);
    // Surrogates lie inside the three-byte span; they have no UTF-8 form.
    if (lo <= kSurrogateHi && piece_hi >= kSurrogateLo) {
      if (lo < kSurrogateLo) same_length_sequences(lo, kSurrogateLo - 1, out);
      if (piece_hi > kSurrogateHi) same_length_sequences(kSurrogateHi + 1, piece_hi, out);
    } else {
      same_length_sequences(lo, piece_hi, out);
    }
    lo = piece_hi + 1;
  }
}

ExprId utf8_expr(Grammar& g, const CodepointSet& set) {
  std::vector<ByteRanges> seqs;
  for (const auto& [lo, hi] : set.ranges()) utf8_sequences(lo, hi, seqs);
  std::vector<ExprId> options;
  options.reserve(seqs.size());
  for (const ByteRanges& seq : seqs) {
    std::vector<ExprId> parts;
    for (const auto& [a, b] : seq) parts.push_back(g.bytes(ByteSet::range(a, b)));
    options.push_back(g.seq(std::move(parts)));
  }
  return g.alt(std::move(options));
}

void append_json_escape(uint32_t c, std::string& out) {
  switch (c) {
    case '"': out += "\\\""; return;
    case '\\': out += "\\\\"; return;
    case '\b': out += "\\b"; return;
    case '\t': out += "\\t"; return;
    case '\n': out += "\\n"; return;
    case '\f': out += "\\f"; return;
    case '\r': out += "\\r"; return;
    default: break;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u00";
  out.push_back(kHex[(c >> 4) & 0xF]);
  out.push_back(kHex[c & 0xF]);
}

bool json_needs_escape(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

}  // namespace

CodepointSet CodepointSet::range(uint32_t lo, uint32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMaxCodepoint);
  if (lo > hi) return;
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), std::pair<uint32_t, uint32_t>{lo, 0});
  ranges_.insert(it, {lo, hi});
  // Merge overlapping and adjacent ranges.
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

void CodepointSet::add_all(const CodepointSet& other) {
  for (const auto& [lo, hi] : other.ranges_) add(lo, hi);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.ranges_.emplace_back(next, kMaxCodepoint);
  return out;
}

CodepointSet CodepointSet::minus(const CodepointSet& other) const {
  CodepointSet both = complement();
  both.add_all(other);
  return both.complement();
}

bool CodepointSet::contains(uint32_t c) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::pair<uint32_t, uint32_t>{c, kMaxCodepoint});
  return it != ranges_.begin() && std::prev(it)->second >= c;
}

ExprId encode_chars(Grammar& g, const CodepointSet& set, CharEncoding encoding) {
  if (encoding == CharEncoding::kUtf8) return utf8_expr(g, set);
  CodepointSet escaped = CodepointSet::range(0, 0x1F);
  escaped.add('"');
  escaped.add('\\');
  std::vector<ExprId> options;
  const CodepointSet raw = set.minus(escaped);
  if (!raw.empty()) options.push_back(utf8_expr(g, raw));
  for (const auto& [lo, hi] : set.ranges()) {
    for (uint32_t c = lo; c <= hi && c <= '\\'; ++c) {
      if (!json_needs_escape(c)) continue;
      std::string text;
      append_json_escape(c, text);
      options.push_back(g.literal(text));
    }
  }
  return g.alt(std::move(options));
}

void append_encoded(uint32_t c, CharEncoding encoding, std::string& out) {
  if (encoding == CharEncoding::kJsonString && json_needs_escape(c)) {
    append_json_escape(c, out);
  } else {
    append_utf8(c, out);
  }
}

std::optional<uint32_t> read_hex_digits(std::string_view text, size_t pos, size_t digits) {
  uint32_t v = 0;
  for (size_t i = 0; i < digits; ++i) {
    const char h = pos + i < text.size() ? text[pos + i] : '\0';
    int d = -1;
    if (h >= '0' && h <= '9') d = h - '0';
    if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
    if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  return v;
}

std::optional<uint32_t> read_utf8_char(std::string_view text, size_t pos, size_t* len) {
  const char32_t cp = utf8::decode(text, pos, len);
  if (cp == utf8::kReplacement && text.substr(pos, *len) != "\xEF\xBF\xBD") return std::nullopt;
  return static_cast<uint32_t>(cp);
}

}  // namespace kiln::grammar
