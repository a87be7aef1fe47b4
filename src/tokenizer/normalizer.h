// The tokenizer.json "normalizer": Unicode normalisation forms (utf8proc), alone or in a Sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

class Normalizer {
 public:
  enum class Form { kNfc, kNfkc, kNfd, kNfkd };

  // `null` is the identity; NFC, NFKC, NFD, NFKD and Sequence of them are supported, any other
  // type is an error naming it.
  static Result<Normalizer> from_json(const nlohmann::json& config);
  static Normalizer of(std::vector<Form> forms) { Normalizer n; n.forms_ = std::move(forms); return n; }

  bool is_identity() const { return forms_.empty(); }
  // `text` must be well-formed UTF-8.
  std::string normalize(std::string_view text) const;

 private:
  std::vector<Form> forms_;
};

}  // namespace kiln
