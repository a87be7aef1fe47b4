// Normalisation through utf8proc, with a fast path for text that no form can change.
#include "tokenizer/normalizer.h"

#include <cstdlib>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace kiln {
namespace {

Status add_forms(const nlohmann::json& config, std::vector<Normalizer::Form>& forms) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return format_error("normalizer: expected an object with a string \"type\"");
  }
  const std::string type = config["type"];
  if (type == "NFC") forms.push_back(Normalizer::Form::kNfc);
  else if (type == "NFKC") forms.push_back(Normalizer::Form::kNfkc);
  else if (type == "NFD") forms.push_back(Normalizer::Form::kNfd);
  else if (type == "NFKD") forms.push_back(Normalizer::Form::kNfkd);
  else if (type == "Sequence") {
    if (!config.contains("normalizers") || !config["normalizers"].is_array()) {
      return format_error("normalizer Sequence: expected an array \"normalizers\"");
    }
    for (const auto& inner : config["normalizers"]) KILN_RETURN_IF_ERROR(add_forms(inner, forms));
  } else {
    return unsupported("normalizer type \"" + type + "\" is not supported (supported: NFC, NFKC, NFD, NFKD, Sequence)");
  }
  return {};
}

// True when `cp` cannot change under `form` whatever surrounds it: combining class 0, no
// decomposition of the kind the form applies, and never the second half of a canonical
// composition (utf8proc marks those with comb_index >= 0x8000; Hangul medial and final jamo
// compose algorithmically). Text made only of such code points is already normalised.
bool is_stable_code_point(char32_t cp, Normalizer::Form form) {
  const bool compat = form == Normalizer::Form::kNfkc || form == Normalizer::Form::kNfkd;
  const bool decompose = form == Normalizer::Form::kNfd || form == Normalizer::Form::kNfkd;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  if (p->combining_class != 0) return false;
  if (p->decomp_seqindex != UINT16_MAX && (compat || p->decomp_type == 0)) return false;
  if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
  if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return false;
  if (decompose && cp >= 0xAC00 && cp <= 0xD7A3) return false;  // Hangul syllables decompose
  return true;
}

bool is_stable(std::string_view text, Normalizer::Form form) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {  // ASCII never changes under any form
      ++i;
      continue;
    }
    size_t len;
    const char32_t cp = utf8::decode(text, i, &len);
    if (!is_stable_code_point(cp, form)) return false;
    i += len;
  }
  return true;
}

std::string normalize_form(std::string_view text, Normalizer::Form form) {
  if (is_stable(text, form)) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Normalizer::Form::kNfc: options |= UTF8PROC_COMPOSE; break;
    case Normalizer::Form::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Normalizer::Form::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case Normalizer::Form::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  // The input is well-formed UTF-8 (the tokenizer sanitises it first), so utf8proc cannot fail.
  assert(n >= 0 && "utf8proc_map failed on well-formed UTF-8");
  std::string result(reinterpret_cast<const char*>(out), n < 0 ? 0 : static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

Result<Normalizer> Normalizer::from_json(const nlohmann::json& config) {
  Normalizer n;
  if (config.is_null()) return n;
  KILN_RETURN_IF_ERROR(add_forms(config, n.forms_));
  return n;
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string s(text);
  for (Form f : forms_) s = normalize_form(s, f);
  return s;
}

}  // namespace kiln
