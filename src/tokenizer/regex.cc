// PCRE2 compile and match. One match-data block per thread serves every pattern.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <cstdio>
#include <cstdlib>

namespace kiln {
namespace {

// Unicode White_Space, as a class body (without brackets).
constexpr const char* kWhiteSpaceBody =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
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

void Regex::CodeDeleter::operator()(pcre2_real_code_8* code) const { pcre2_code_free(code); }

Result<Regex> Regex::compile(const std::string& pattern) {
  KILN_ASSIGN_OR_RETURN(std::string translated, translate_pattern(pattern));
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return format_error("regex \"" + pattern + "\" does not compile at offset " + std::to_string(offset) + ": " +
                        reinterpret_cast<const char*>(message));
  }
  // JIT is a speed-up only: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  Regex r;
  r.pattern_ = pattern;
  r.code_ = std::shared_ptr<pcre2_real_code_8>(code, CodeDeleter{});
  return r;
}

Result<Regex> Regex::literal(const std::string& literal) {
  std::string quoted;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}/-#&~ \t\n\r").find(c) != std::string_view::npos || c == '\0') {
      if (c == '\0') {
        quoted += "\\x{0}";
        continue;
      }
      if (c == '\n') { quoted += "\\n"; continue; }
      if (c == '\r') { quoted += "\\r"; continue; }
      if (c == '\t') { quoted += "\\t"; continue; }
      quoted += '\\';
    }
    quoted += c;
  }
  KILN_ASSIGN_OR_RETURN(Regex r, compile(quoted));
  r.pattern_ = literal;
  return r;
}

bool Regex::find(std::string_view text, size_t start, size_t* begin, size_t* end) const {
  pcre2_match_data* md = thread_match_data();
  const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    // A resource limit (JIT stack, match limit) on input the pre-tokenizer patterns should never
    // need: stopping beats silently tokenising the rest of the text differently.
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    std::fprintf(stderr, "kiln: regex \"%s\" failed at offset %zu: %s\n", pattern_.c_str(), start,
                 reinterpret_cast<const char*>(message));
    std::abort();
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace kiln
