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

// True when every code point of `text` is left unchanged by `form` whatever surrounds it: below
// U+0300 nothing composes or decomposes canonically (ASCII alone for the compatibility forms), and
// CJK unified ideographs never change.
bool is_stable(std::string_view text, Normalizer::Form form) {
  const bool compat = form == Normalizer::Form::kNfkc || form == Normalizer::Form::kNfkd;
  const bool decompose = form == Normalizer::Form::kNfd || form == Normalizer::Form::kNfkd;
  const char32_t limit = compat ? 0x80 : (decompose ? 0xC0 : 0x300);
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    const char32_t cp = utf8::decode(text, i, &len);
    if (cp >= limit && !(cp >= 0x4E00 && cp <= 0x9FFF)) return false;
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
