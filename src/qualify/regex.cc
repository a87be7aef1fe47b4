#include "qualify/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kiln::qualify {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Result<Regex> Regex::compile(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &err,
                                   &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    return invalid_argument("pattern \"" + std::string(pattern) + "\" does not compile at offset " +
                            std::to_string(offset) + ": " + reinterpret_cast<const char*>(buf));
  }
  Regex r;
  r.code_ = std::make_shared<Code>();
  r.code_->code = code;
  return r;
}

namespace {

bool run(pcre2_code* code, std::string_view text, uint32_t options) {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, options, md, nullptr);
  pcre2_match_data_free(md);
  return rc >= 0;
}

}  // namespace

bool Regex::search(std::string_view text) const { return run(code_->code, text, 0); }

bool Regex::full_match(std::string_view text) const {
  return run(code_->code, text, PCRE2_ANCHORED | PCRE2_ENDANCHORED);
}

bool full_match(std::string_view pattern, std::string_view text) {
  Result<Regex> r = Regex::compile(pattern);
  return r.ok() && r->full_match(text);
}

}  // namespace kiln::qualify
