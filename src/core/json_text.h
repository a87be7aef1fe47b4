// JSON text from outside Kiln (request bodies, datasets, uploaded adapters, model and tokenizer
// files, model output): parsed with a nesting limit checked first. Every recursive walk over a
// parsed value (serialising it, copying it, the chat template's conversion) is then bounded by
// that limit, so no input can exhaust a thread's stack.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

inline constexpr int kMaxJsonDepth = 64;

// kInvalidArgument naming the byte offset where `text` opens its (max_depth + 1)-th level of
// nested arrays and objects (brackets inside strings do not count). Linear, no allocation.
Status check_json_depth(std::string_view text, int max_depth = kMaxJsonDepth);

// One JSON document of at most kMaxJsonDepth levels, without exceptions. Errors are
// kInvalidArgument: "<what> nests deeper than 64 levels (byte N)" or "<what> is not valid JSON:
// <the parser's message, with the byte offset>".
Result<nlohmann::json> parse_json(std::string_view text, std::string_view what);
Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text, std::string_view what);

}  // namespace kiln
