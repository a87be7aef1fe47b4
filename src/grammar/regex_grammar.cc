// The regular-expression parser: recursive descent over code points, building grammar
// expressions directly. Character classes follow ECMAScript's ASCII meanings (\d \w), with \s
// limited to the white space ECMAScript and PCRE2 agree on, and `.` excluding line terminators.
#include "grammar/regex_grammar.h"

#include <optional>
#include <string>

namespace kiln::grammar {

namespace {

constexpr int kMaxNesting = 128;
constexpr uint32_t kMaxRepeat = 100000;

CodepointSet digit_set() { return CodepointSet::range('0', '9'); }

CodepointSet word_set() {
  CodepointSet s = CodepointSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_');
  return s;
}

CodepointSet space_set() {
  CodepointSet s = CodepointSet::range('\t', '\r');  // \t \n \v \f \r
  for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) s.add(c);
  s.add(0x2000, 0x200A);
  return s;
}

CodepointSet dot_set() {
  CodepointSet s = CodepointSet::of('\n');
  s.add('\r');
  s.add(0x2028, 0x2029);
  return s.complement();
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view pattern, CharEncoding encoding)
      : g_(g), pattern_(pattern), encoding_(encoding) {}

  Result<ExprId> parse(RegexScope scope) {
    bool anchored_start = false, anchored_end = false;
    std::string_view body = pattern_;
    if (!body.empty() && body.front() == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    // A final '$' anchors unless it is escaped (an odd run of backslashes before it).
    if (!body.empty() && body.back() == '$') {
      size_t slashes = 0;
      while (slashes + 1 < body.size() && body[body.size() - 2 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0 && body.size() > pos_) {
        anchored_end = true;
        end_ = body.size() - 1;
      }
    }
    if (end_ == std::string_view::npos) end_ = body.size();
    KILN_ASSIGN_OR_RETURN(ExprId e, parse_alternatives(0));
    if (pos_ < end_) return error(peek() == ')' ? "')' without a matching '('" : "unexpected character");
    if (scope == RegexScope::kWhole) return e;
    const ExprId any = g_.star(encode_chars(g_, CodepointSet::any(), encoding_));
    std::vector<ExprId> parts;
    if (!anchored_start) parts.push_back(any);
    parts.push_back(e);
    if (!anchored_end) parts.push_back(g_.star(encode_chars(g_, CodepointSet::any(), encoding_)));
    return g_.seq(std::move(parts));
  }

 private:
  Status error_at(size_t at, const std::string& what) const {
    return invalid_argument("regex '" + std::string(pattern_) + "': " + what + " at offset " + std::to_string(at));
  }
  Status error(const std::string& what) const { return error_at(pos_, what); }
  bool at_end() const { return pos_ >= end_; }
  char peek(size_t ahead = 0) const { return pos_ + ahead < end_ ? pattern_[pos_ + ahead] : '\0'; }

  Result<ExprId> parse_alternatives(int depth) {
    std::vector<ExprId> options;
    KILN_ASSIGN_OR_RETURN(ExprId first, parse_sequence(depth));
    options.push_back(first);
    while (!at_end() && peek() == '|') {
      ++pos_;
      KILN_ASSIGN_OR_RETURN(ExprId next, parse_sequence(depth));
      options.push_back(next);
    }
    return g_.alt(std::move(options));
  }

  Result<ExprId> parse_sequence(int depth) {
    std::vector<ExprId> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      KILN_ASSIGN_OR_RETURN(ExprId atom, parse_atom(depth));
      KILN_ASSIGN_OR_RETURN(ExprId item, parse_quantifiers(atom));
      items.push_back(item);
    }
    return g_.seq(std::move(items));
  }

  // Reads "{m}", "{m,}" or "{m,n}" at pos_; false (pos_ unchanged) when the brace is a literal.
  bool read_braces(uint32_t* min, int32_t* max, bool* too_large) {
    size_t p = pos_ + 1;
    auto number = [&](uint64_t* v) {
      const size_t start = p;
      *v = 0;
      while (p < end_ && pattern_[p] >= '0' && pattern_[p] <= '9') {
        *v = std::min<uint64_t>(*v * 10 + static_cast<uint64_t>(pattern_[p] - '0'), uint64_t{1} << 40);
        ++p;
      }
      return p > start;
    };
    uint64_t lo = 0, hi = 0;
    if (!number(&lo)) return false;
    bool bounded = true;
    hi = lo;
    if (p < end_ && pattern_[p] == ',') {
      ++p;
      bounded = number(&hi);
    }
    if (p >= end_ || pattern_[p] != '}') return false;
    *too_large = lo > kMaxRepeat || (bounded && hi > kMaxRepeat);
    *min = static_cast<uint32_t>(std::min<uint64_t>(lo, kMaxRepeat));
    *max = bounded ? static_cast<int32_t>(std::min<uint64_t>(hi, kMaxRepeat)) : Expr::kUnbounded;
    pos_ = p + 1;
    return true;
  }

  Result<ExprId> parse_quantifiers(ExprId atom) {
    ExprId e = atom;
    for (;;) {
      const size_t at = pos_;
      const char c = peek();
      uint32_t min = 0;
      int32_t max = 0;
      bool too_large = false;
      if (at_end()) return e;
      if (c == '*') {
        ++pos_, min = 0, max = Expr::kUnbounded;
      } else if (c == '+') {
        ++pos_, min = 1, max = Expr::kUnbounded;
      } else if (c == '?') {
        ++pos_, min = 0, max = 1;
      } else if (c == '{' && read_braces(&min, &max, &too_large)) {
        if (too_large) return error_at(at, "repeat count above " + std::to_string(kMaxRepeat));
        if (max != Expr::kUnbounded && static_cast<uint32_t>(max) < min) return error_at(at, "repeat maximum below its minimum");
      } else {
        return e;
      }
      if (peek() == '?') {
        ++pos_;  // lazy: the same language
      } else if (peek() == '+') {
        return error("possessive quantifier (it changes the language by refusing to backtrack) is not supported");
      }
      if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?')) return error("nothing to repeat");
      e = g_.repeat(e, static_cast<int32_t>(min), max);
    }
  }

  Result<ExprId> parse_atom(int depth) {
    const char c = peek();
    switch (c) {
      case '(': return parse_group(depth);
      case '[': return parse_class();
      case '.': ++pos_; return encode_chars(g_, dot_set(), encoding_);
      case '^': return error("anchor '^' inside the pattern is not supported (only at its start)");
      case '$': return error("anchor '$' inside the pattern is not supported (only at its end)");
      case '*': case '+': case '?': return error("nothing to repeat");
      case '\\': {
        CodepointSet set;
        KILN_RETURN_IF_ERROR(read_escape(false, &set));
        return encode_chars(g_, set, encoding_);
      }
      default: break;
    }
    KILN_ASSIGN_OR_RETURN(const uint32_t cp, read_literal_char());
    return encode_chars(g_, CodepointSet::of(cp), encoding_);
  }

  Result<ExprId> parse_group(int depth) {
    const size_t open = pos_++;
    if (depth + 1 > kMaxNesting) return error_at(open, "groups nest deeper than " + std::to_string(kMaxNesting));
    if (peek() == '?') {
      const std::string_view rest = pattern_.substr(pos_, std::min<size_t>(4, end_ - pos_));
      if (rest.starts_with("?:")) {
        pos_ += 2;
      } else if (rest.starts_with("?=") || rest.starts_with("?!")) {
        return error_at(open, "lookahead is not supported (not a regular language)");
      } else if (rest.starts_with("?<=") || rest.starts_with("?<!")) {
        return error_at(open, "lookbehind is not supported (not a regular language)");
      } else if (rest.starts_with("?<") || rest.starts_with("?P<")) {
        pos_ += rest.starts_with("?<") ? 2 : 3;
        while (!at_end() && peek() != '>') ++pos_;
        if (at_end()) return error_at(open, "group name is never closed");
        ++pos_;
      } else {
        return error_at(open, "group flags '(?...' are not supported");
      }
    }
    KILN_ASSIGN_OR_RETURN(ExprId inner, parse_alternatives(depth + 1));
    if (at_end() || peek() != ')') return error_at(open, "'(' is never closed");
    ++pos_;
    return inner;
  }

  Result<uint32_t> read_literal_char() {
    size_t len = 0;
    const std::optional<uint32_t> cp = read_utf8_char(pattern_.substr(0, end_), pos_, &len);
    if (!cp) return error("the pattern is not valid UTF-8");
    pos_ += len;
    return *cp;
  }

  Result<uint32_t> read_hex(size_t at, size_t digits) {
    const std::optional<uint32_t> v = read_hex_digits(pattern_.substr(0, end_), pos_, digits);
    if (!v) return error_at(at, "escape needs " + std::to_string(digits) + " hex digits");
    pos_ += digits;
    return *v;
  }

  // An escape at pos_ ('\\'), as the set of code points it stands for. Inside a class, \b is
  // the backspace character.
  Status read_escape(bool in_class, CodepointSet* out) {
    const size_t at = pos_++;
    if (at_end()) return error_at(at, "the pattern ends with a lone '\\'");
    const char e = peek();
    ++pos_;
    switch (e) {
      case 'd': *out = digit_set(); return {};
      case 'D': *out = digit_set().complement(); return {};
      case 'w': *out = word_set(); return {};
      case 'W': *out = word_set().complement(); return {};
      case 's': *out = space_set(); return {};
      case 'S': *out = space_set().complement(); return {};
      case 'n': *out = CodepointSet::of('\n'); return {};
      case 'r': *out = CodepointSet::of('\r'); return {};
      case 't': *out = CodepointSet::of('\t'); return {};
      case 'f': *out = CodepointSet::of('\f'); return {};
      case 'v': *out = CodepointSet::of('\v'); return {};
      case '0':
        if (peek() >= '0' && peek() <= '9') return error_at(at, "octal escapes are not supported");
        *out = CodepointSet::of(0);
        return {};
      case 'b':
        if (in_class) {
          *out = CodepointSet::of('\b');
          return {};
        }
        return error_at(at, "word boundary '\\b' is not supported (not a regular language over characters)");
      case 'B': return error_at(at, "word boundary '\\B' is not supported (not a regular language over characters)");
      case 'k': return error_at(at, "backreference '\\k' is not supported (not a regular language)");
      case 'p': case 'P': return error_at(at, "Unicode property escapes are not supported");
      case 'c': return error_at(at, "control escapes '\\c' are not supported");
      case 'x': {
        KILN_ASSIGN_OR_RETURN(const uint32_t v, read_hex(at, 2));
        *out = CodepointSet::of(v);
        return {};
      }
      case 'u': {
        uint32_t v = 0;
        if (peek() == '{') {
          ++pos_;
          size_t digits = 0;
          while (!at_end() && peek() != '}' && digits < 7) {
            KILN_ASSIGN_OR_RETURN(const uint32_t d, read_hex(at, 1));
            v = v * 16 + d;
            ++digits;
          }
          if (digits == 0 || at_end() || peek() != '}') return error_at(at, "'\\u{' needs hex digits and '}'");
          ++pos_;
        } else {
          KILN_ASSIGN_OR_RETURN(v, read_hex(at, 4));
        }
        if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) return error_at(at, "escape names no Unicode scalar value");
        *out = CodepointSet::of(v);
        return {};
      }
      default: break;
    }
    if (e >= '1' && e <= '9') return error_at(at, "backreference '\\" + std::string(1, e) + "' is not supported (not a regular language)");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return error_at(at, "unknown escape '\\" + std::string(1, e) + "'");
    --pos_;  // any other character escapes itself
    KILN_ASSIGN_OR_RETURN(const uint32_t cp, read_literal_char());
    *out = CodepointSet::of(cp);
    return {};
  }

  Result<ExprId> parse_class() {
    const size_t open = pos_++;
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    CodepointSet set;
    bool first = true;
    for (;;) {
      if (at_end()) return error_at(open, "character class is never closed");
      if (peek() == ']' && !first) break;
      first = false;
      CodepointSet lo_set;
      if (peek() == '\\') {
        KILN_RETURN_IF_ERROR(read_escape(true, &lo_set));
      } else {
        KILN_ASSIGN_OR_RETURN(const uint32_t c, read_literal_char());
        lo_set = CodepointSet::of(c);
      }
      const bool single = lo_set.ranges().size() == 1 && lo_set.ranges()[0].first == lo_set.ranges()[0].second;
      if (single && peek() == '-' && peek(1) != ']' && pos_ + 1 < end_) {
        const size_t dash = pos_++;
        CodepointSet hi_set;
        if (peek() == '\\') {
          KILN_RETURN_IF_ERROR(read_escape(true, &hi_set));
        } else {
          KILN_ASSIGN_OR_RETURN(const uint32_t c, read_literal_char());
          hi_set = CodepointSet::of(c);
        }
        if (hi_set.ranges().size() != 1 || hi_set.ranges()[0].first != hi_set.ranges()[0].second) {
          return error_at(dash, "a class like \\d cannot end a range");
        }
        const uint32_t lo = lo_set.ranges()[0].first, hi = hi_set.ranges()[0].first;
        if (hi < lo) return error_at(dash, "character range ends below where it starts");
        set.add(lo, hi);
        continue;
      }
      set.add_all(lo_set);
    }
    ++pos_;
    return encode_chars(g_, negated ? set.complement() : set, encoding_);
  }

  Grammar& g_;
  std::string_view pattern_;
  CharEncoding encoding_;
  size_t pos_ = 0;
  size_t end_ = std::string_view::npos;
};

}  // namespace

Result<ExprId> regex_expr(Grammar& g, std::string_view pattern, CharEncoding encoding, RegexScope scope) {
  return RegexParser(g, pattern, encoding).parse(scope);
}

Result<Grammar> regex_grammar(std::string_view pattern) {
  Grammar g;
  const RuleId root = g.add_rule("root");
  KILN_ASSIGN_OR_RETURN(const ExprId body, regex_expr(g, pattern, CharEncoding::kUtf8, RegexScope::kWhole));
  g.set_body(root, body);
  g.set_root(root);
  return g;
}

}  // namespace kiln::grammar
