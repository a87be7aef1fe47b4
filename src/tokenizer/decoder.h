// The tokenizer.json "decoder": how token strings become bytes. ByteLevel maps each character of
// the byte-level alphabet back to its byte; with no decoder, tokens are joined by spaces.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

class Decoder {
 public:
  enum class Kind { kNone, kByteLevel };

  static Result<Decoder> from_json(const nlohmann::json& config);
  static Decoder byte_level() { Decoder d; d.kind_ = Kind::kByteLevel; return d; }

  Kind kind() const { return kind_; }
  // The bytes one token contributes. ByteLevel: each character's byte when every character is in
  // the alphabet, else the token's own UTF-8 (how added tokens such as "<|im_end|>" come out).
  std::string token_bytes(std::string_view token) const;
  // What goes between two tokens' bytes ("" for ByteLevel, " " without a decoder).
  std::string_view separator() const { return kind_ == Kind::kNone ? " " : ""; }

 private:
  Kind kind_ = Kind::kNone;
};

}  // namespace kiln
