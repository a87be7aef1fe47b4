// The GBNF parser: recursive descent over the text, one rule body at a time. A rule's body ends
// where the next `name ::=` begins, so alternatives and groups may span lines freely. Rule
// references resolve once every rule is read.
#include "grammar/gbnf.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "grammar/codepoints.h"

namespace kiln::grammar {

namespace {

constexpr int kMaxNesting = 128;         // groups inside groups
constexpr uint32_t kMaxRepeat = 100000;  // a {m,n} bound

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  Result<Grammar> parse() {
    skip_space();
    while (pos_ < text_.size()) {
      KILN_RETURN_IF_ERROR(parse_rule());
      skip_space();
    }
    for (const auto& [name, use] : uses_) {
      if (defined_.count(name) == 0) return error_at(use, "rule '" + name + "' is used but never defined");
    }
    auto root = rules_.find("root");
    if (root == rules_.end() || defined_.count("root") == 0) {
      return invalid_argument("gbnf: the grammar defines no 'root' rule");
    }
    g_.set_root(root->second);
    return std::move(g_);
  }

 private:
  Status error_at(size_t at, const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line, column = 1;
      } else if ((static_cast<uint8_t>(text_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    return invalid_argument("gbnf " + std::to_string(line) + ":" + std::to_string(column) + ": " + what);
  }
  Status error(const std::string& what) const { return error_at(pos_, what); }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  // Spaces, tabs, line ends and comments.
  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string_view read_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // Whether a rule definition (`name ::=`) starts at the current position.
  bool at_rule_start() {
    const size_t save = pos_;
    const bool named = !read_name().empty();
    skip_space();
    const bool starts = named && text_.substr(pos_, 3) == "::=";
    pos_ = save;
    return starts;
  }

  RuleId rule_named(std::string_view name) {
    auto [it, fresh] = rules_.emplace(std::string(name), -1);
    if (fresh) it->second = g_.add_rule(std::string(name));
    return it->second;
  }

  Status parse_rule() {
    const size_t start = pos_;
    const std::string_view name = read_name();
    if (name.empty()) return error("expected a rule name");
    skip_space();
    if (text_.substr(pos_, 3) != "::=") return error("expected '::=' after the rule name '" + std::string(name) + "'");
    pos_ += 3;
    auto [it, fresh] = defined_.emplace(std::string(name), start);
    if (!fresh) {
      return error_at(start, "rule '" + std::string(name) + "' is defined twice (first at " + where(it->second) + ")");
    }
    const RuleId rule = rule_named(name);
    KILN_ASSIGN_OR_RETURN(const ExprId body, parse_alternatives(0));
    if (peek() == ')') return error("')' without a matching '('");
    g_.set_body(rule, body);
    return {};
  }

  std::string where(size_t at) const {
    const std::string message = error_at(at, "").message();
    return message.substr(5, message.size() - 7);  // "gbnf L:C: " -> "L:C"
  }

  Result<ExprId> parse_alternatives(int depth) {
    std::vector<ExprId> options;
    KILN_ASSIGN_OR_RETURN(ExprId first, parse_sequence(depth));
    options.push_back(first);
    while (peek() == '|') {
      ++pos_;
      KILN_ASSIGN_OR_RETURN(ExprId next, parse_sequence(depth));
      options.push_back(next);
    }
    return g_.alt(std::move(options));
  }

  // Items until '|', ')', the end, or the next rule's definition.
  Result<ExprId> parse_sequence(int depth) {
    std::vector<ExprId> items;
    for (;;) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')') break;
      if (depth == 0 && is_name_char(peek()) && at_rule_start()) break;
      KILN_ASSIGN_OR_RETURN(ExprId item, parse_item(depth));
      items.push_back(item);
    }
    return g_.seq(std::move(items));
  }

  Result<ExprId> parse_item(int depth) {
    KILN_ASSIGN_OR_RETURN(ExprId e, parse_primary(depth));
    for (;;) {
      const char c = peek();
      if (c == '*') {
        ++pos_, e = g_.star(e);
      } else if (c == '+') {
        ++pos_, e = g_.repeat(e, 1, Expr::kUnbounded);
      } else if (c == '?') {
        ++pos_, e = g_.optional(e);
      } else if (c == '{') {
        KILN_ASSIGN_OR_RETURN(e, parse_braces(e));
      } else {
        return e;
      }
    }
  }

  Result<uint32_t> read_count() {
    const size_t start = pos_;
    uint64_t n = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + static_cast<uint64_t>(peek() - '0');
      if (n > kMaxRepeat) return error_at(start, "repeat count is larger than " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    return static_cast<uint32_t>(n);
  }

  Result<ExprId> parse_braces(ExprId e) {
    const size_t open = pos_++;
    skip_space();
    const bool has_min = peek() >= '0' && peek() <= '9';
    KILN_ASSIGN_OR_RETURN(const uint32_t min, read_count());
    skip_space();
    int32_t max = static_cast<int32_t>(min);
    if (peek() == ',') {
      ++pos_;
      skip_space();
      max = Expr::kUnbounded;
      if (peek() >= '0' && peek() <= '9') {
        KILN_ASSIGN_OR_RETURN(const uint32_t m, read_count());
        max = static_cast<int32_t>(m);
      }
      skip_space();
    } else if (!has_min) {
      return error("expected a repeat count after '{'");
    }
    if (peek() != '}') return error("expected '}' to close the repeat opened at " + where(open));
    ++pos_;
    if (max != Expr::kUnbounded && static_cast<uint32_t>(max) < min) {
      return error_at(open, "repeat {" + std::to_string(min) + "," + std::to_string(max) + "} has its maximum below its minimum");
    }
    return g_.repeat(e, static_cast<int32_t>(min), max);
  }

  Result<ExprId> parse_primary(int depth) {
    const char c = peek();
    if (c == '"') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return encode_chars(g_, CodepointSet::any(), CharEncoding::kUtf8);
    }
    if (c == '(') {
      if (depth + 1 > kMaxNesting) return error("groups nest deeper than " + std::to_string(kMaxNesting));
      const size_t open = pos_++;
      KILN_ASSIGN_OR_RETURN(ExprId inner, parse_alternatives(depth + 1));
      skip_space();
      if (peek() != ')') return error_at(open, "'(' is never closed");
      ++pos_;
      return inner;
    }
    if (is_name_char(c)) {
      const size_t at = pos_;
      const std::string_view name = read_name();
      uses_.emplace(std::string(name), at);
      return g_.ref(rule_named(name));
    }
    if (c == '<' || c == '!') return error("token references ('<...>', '!') are not supported");
    return error("unexpected '" + std::string(1, c) + "'");
  }

  // One code point at pos_ (an escape or a UTF-8 character); advances past it.
  Result<uint32_t> read_char() {
    if (peek() == '\\') {
      const size_t at = pos_;
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return uint32_t{'\n'};
        case 'r': return uint32_t{'\r'};
        case 't': return uint32_t{'\t'};
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(e);
        case 'x': return read_hex(at, 2);
        case 'u': return read_hex(at, 4);
        case 'U': return read_hex(at, 8);
        default: return error_at(at, "unknown escape '\\" + std::string(1, e) + "'");
      }
    }
    size_t len = 0;
    const std::optional<uint32_t> cp = read_utf8_char(text_, pos_, &len);
    if (!cp) return error("the text is not valid UTF-8 here");
    pos_ += len;
    return *cp;
  }

  Result<uint32_t> read_hex(size_t at, size_t digits) {
    const std::optional<uint32_t> v = read_hex_digits(text_, pos_, digits);
    if (!v) return error_at(at, "escape needs " + std::to_string(digits) + " hex digits");
    pos_ += digits;
    if (*v > kMaxCodepoint || (*v >= 0xD800 && *v <= 0xDFFF)) return error_at(at, "escape names no Unicode scalar value");
    return *v;
  }

  Result<ExprId> parse_literal() {
    const size_t open = pos_++;
    std::string bytes;
    for (;;) {
      if (at_end() || peek() == '\n') return error_at(open, "string literal is never closed");
      if (peek() == '"') break;
      KILN_ASSIGN_OR_RETURN(const uint32_t c, read_char());
      append_encoded(c, CharEncoding::kUtf8, bytes);
    }
    ++pos_;
    return g_.literal(bytes);
  }

  Result<ExprId> parse_class() {
    const size_t open = pos_++;
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    CodepointSet set;
    for (;;) {
      if (at_end()) return error_at(open, "character class is never closed");
      if (peek() == ']') break;
      KILN_ASSIGN_OR_RETURN(const uint32_t lo, read_char());
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
        const size_t dash = pos_++;
        KILN_ASSIGN_OR_RETURN(hi, read_char());
        if (hi < lo) return error_at(dash, "character range ends below where it starts");
      }
      set.add(lo, hi);
    }
    ++pos_;
    return encode_chars(g_, negated ? set.complement() : set, CharEncoding::kUtf8);
  }

  std::string_view text_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, RuleId> rules_;
  std::map<std::string, size_t> defined_;  // name -> where its definition starts
  std::map<std::string, size_t> uses_;     // name -> its first use
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace kiln::grammar
