// A hand-written state machine for Jinja2's lexing rules (see lexer.h).
#include "tokenizer/jinja/lexer.h"

#include <cstring>

#include "tokenizer/jinja/template_error.h"
#include "tokenizer/utf8.h"

namespace kiln::jinja {
namespace {

bool is_space_at(const std::string& s, size_t pos, size_t* len) {
  const char32_t cp = utf8::decode(s, pos, len);
  return utf8::is_python_space(cp);
}

// Python's str.rstrip() with no arguments.
std::string_view rstrip(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t len;
    if (!utf8::is_python_space(utf8::decode(s, start, &len))) break;
    end = start;
  }
  return s.substr(0, end);
}

bool all_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    if (!utf8::is_python_space(utf8::decode(s, i, &len))) return false;
    i += len;
  }
  return !s.empty();
}

size_t skip_space(const std::string& s, size_t pos) {
  size_t len;
  while (pos < s.size() && is_space_at(s, pos, &len)) pos += len;
  return pos;
}

bool starts_with_at(const std::string& s, size_t pos, const char* prefix) {
  return s.compare(pos, std::strlen(prefix), prefix) == 0;
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's "unicode-escape" decoding of a string literal body, as Jinja2 applies it.
std::string unescape(const std::string& body, size_t offset) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex = [&](size_t digits) {
      const std::string h = body.substr(i + 1, digits);
      if (h.size() != digits || h.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        throw TemplateError("bad \\" + std::string(1, c) + " escape in string literal", offset);
      }
      i += digits;
      return static_cast<char32_t>(std::stoul(h, nullptr, 16));
    };
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': utf8::append(out, hex(2)); break;
      case 'u': utf8::append(out, hex(4)); break;
      case 'U': utf8::append(out, hex(8)); break;
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
        char32_t v = c - '0';
        for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) v = v * 8 + (body[++i] - '0');
        utf8::append(out, v);
        break;
      }
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit_text(std::string_view(s_).substr(pos), pos);
        break;
      }
      const char kind = s_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < s_.size() && (s_[start + 2] == '-' || s_[start + 2] == '+') ? s_[start + 2] : 0;
      std::string_view text = std::string_view(s_).substr(pos, start - pos);
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      emit_text(text, pos);
      size_t body = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = end_of_comment(start, body);
      } else if (kind == '%' && is_raw_begin(body, &pos)) {
        pos = raw_block(start, pos);
      } else {
        pos = tag(kind, start, body);
      }
      line_starting = pos > 0 && s_[pos - 1] == '\n';
    }
    tokens_.push_back({Token::Type::kEnd, "", s_.size()});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t b = s_.find('{', pos);
      if (b == std::string::npos || b + 1 >= s_.size()) return std::string::npos;
      const char n = s_[b + 1];
      if (n == '{' || n == '%' || n == '#') return b;
      pos = b + 1;
    }
  }

  void emit_text(std::string_view text, size_t offset) {
    if (!text.empty()) tokens_.push_back({Token::Type::kText, std::string(text), offset});
  }

  // After a block or comment end: "-" strips all following whitespace, "+" keeps it, otherwise
  // trim_blocks drops one newline.
  size_t after_block_end(size_t end, char sign) const {
    if (sign == '-') return skip_space(s_, end);
    if (sign == '+') return end;
    return end < s_.size() && s_[end] == '\n' ? end + 1 : end;
  }

  size_t end_of_comment(size_t start, size_t body) const {
    const size_t close = s_.find("#}", body);
    if (close == std::string::npos) throw TemplateError("missing end of comment tag", start);
    const char sign = close > body && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : 0;
    return after_block_end(close + 2, sign);
  }

  // "{% raw %}" (or "{%- raw -%}" ...) starting at `body`; sets `after` past it.
  bool is_raw_begin(size_t body, size_t* after) const {
    size_t p = skip_space(s_, body);
    if (!starts_with_at(s_, p, "raw") || (p + 3 < s_.size() && is_name_char(s_[p + 3]))) return false;
    p = skip_space(s_, p + 3);
    if (starts_with_at(s_, p, "-%}")) {
      *after = skip_space(s_, p + 3);
      return true;
    }
    if (starts_with_at(s_, p, "%}")) {
      *after = p + 2;
      return true;
    }
    return false;
  }

  size_t raw_block(size_t start, size_t pos) {
    size_t search = pos;
    while (true) {
      const size_t b = s_.find("{%", search);
      if (b == std::string::npos) throw TemplateError("missing end of raw directive", start);
      size_t p = b + 2;
      const char sign = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p] : 0;
      if (sign) ++p;
      p = skip_space(s_, p);
      if (starts_with_at(s_, p, "endraw")) {
        p = skip_space(s_, p + 6);
        const char end_sign = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p] : 0;
        if (starts_with_at(s_, p + (end_sign ? 1 : 0), "%}")) {
          std::string_view text = std::string_view(s_).substr(pos, b - pos);
          if (sign == '-') {
            text = rstrip(text);
          } else if (sign != '+') {
            const size_t nl = text.rfind('\n');
            const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
            if (l_pos > 0 && all_space(text.substr(l_pos))) text = text.substr(0, l_pos);
          }
          emit_text(text, pos);
          return after_block_end(p + (end_sign ? 1 : 0) + 2, end_sign);
        }
      }
      search = b + 2;
    }
  }

  // Tokens inside {{ }} or {% %}; returns the position after the end tag.
  size_t tag(char kind, size_t start, size_t body) {
    const bool variable = kind == '{';
    tokens_.push_back({variable ? Token::Type::kVariableBegin : Token::Type::kBlockBegin, "", start});
    std::vector<char> brackets;
    size_t p = body;
    while (true) {
      p = skip_space(s_, p);
      if (p >= s_.size()) {
        throw TemplateError(std::string("missing end of ") + (variable ? "expression \"}}\"" : "statement \"%}\""), start);
      }
      if (brackets.empty()) {
        if (variable) {
          if (starts_with_at(s_, p, "-}}")) {
            tokens_.push_back({Token::Type::kVariableEnd, "", p});
            return skip_space(s_, p + 3);
          }
          if (starts_with_at(s_, p, "}}")) {
            tokens_.push_back({Token::Type::kVariableEnd, "", p});
            return p + 2;
          }
        } else {
          for (const char sign : {'-', '+', '\0'}) {
            const size_t q = p + (sign ? 1 : 0);
            if ((sign == 0 || s_[p] == sign) && starts_with_at(s_, q, "%}")) {
              tokens_.push_back({Token::Type::kBlockEnd, "", p});
              return after_block_end(q + 2, sign);
            }
          }
        }
      }
      p = one_token(p, brackets);
    }
  }

  size_t one_token(size_t p, std::vector<char>& brackets) {
    const char c = s_[p];
    if (is_name_start(c)) {
      size_t e = p;
      while (e < s_.size() && is_name_char(s_[e])) ++e;
      tokens_.push_back({Token::Type::kName, s_.substr(p, e - p), p});
      return e;
    }
    if (is_digit(c)) return number(p);
    if (c == '\'' || c == '"') {
      size_t e = p + 1;
      while (e < s_.size() && s_[e] != c) e += s_[e] == '\\' ? 2 : 1;
      if (e >= s_.size()) throw TemplateError("unterminated string literal", p);
      tokens_.push_back({Token::Type::kString, unescape(s_.substr(p + 1, e - p - 1), p), p});
      return e + 1;
    }
    static const char* kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                       "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOperators) {
      if (starts_with_at(s_, p, op)) {
        const std::string o = op;
        if (o == "(" || o == "[" || o == "{") brackets.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
        if (o == ")" || o == "]" || o == "}") {
          if (brackets.empty()) throw TemplateError("unexpected '" + o + "'", p);
          if (brackets.back() != o[0]) {
            throw TemplateError("unexpected '" + o + "', expected '" + std::string(1, brackets.back()) + "'", p);
          }
          brackets.pop_back();
        }
        tokens_.push_back({Token::Type::kOperator, o, p});
        return p + o.size();
      }
    }
    size_t len;
    utf8::decode(s_, p, &len);
    throw TemplateError("unexpected character '" + s_.substr(p, len) + "'", p);
  }

  size_t number(size_t p) {
    auto digits = [&](size_t q) {
      // (\d+_)*\d+
      size_t e = q;
      while (e < s_.size() && (is_digit(s_[e]) || (s_[e] == '_' && e + 1 < s_.size() && is_digit(s_[e + 1]) && e > q))) ++e;
      return e;
    };
    size_t e = digits(p);
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t q = e + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && is_digit(s_[q])) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text = s_.substr(p, e - p);
    std::string clean;
    for (char ch : text) {
      if (ch != '_') clean += ch;
    }
    tokens_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInteger, clean, p});
    return e;
  }

  const std::string& s_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_template_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

std::string describe_position(const std::string& source, size_t offset) {
  if (offset > source.size()) offset = source.size();
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  const size_t column = utf8::length(std::string_view(source).substr(line_start, offset - line_start)) + 1;
  return "line " + std::to_string(line) + " column " + std::to_string(column);
}

}  // namespace kiln::jinja
