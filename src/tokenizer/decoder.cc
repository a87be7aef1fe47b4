// Decoders: ByteLevel, or none.
#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace kiln {

Result<Decoder> Decoder::from_json(const nlohmann::json& config) {
  Decoder d;
  if (config.is_null()) return d;
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return format_error("decoder: expected an object with a string \"type\"");
  }
  const std::string type = config["type"];
  if (type == "ByteLevel") {
    d.kind_ = Kind::kByteLevel;
    return d;
  }
  return unsupported("decoder type \"" + type + "\" is not supported (supported: ByteLevel)");
}

std::string Decoder::token_bytes(std::string_view token) const {
  if (kind_ == Kind::kNone) return std::string(token);
  const auto& alphabet = ByteLevelAlphabet::get();
  std::string bytes;
  bytes.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    size_t len;
    const int b = alphabet.byte_of(utf8::decode(token, i, &len));
    if (b < 0) return std::string(token);
    bytes.push_back(static_cast<char>(b));
    i += len;
  }
  return bytes;
}

}  // namespace kiln
