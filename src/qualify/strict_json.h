// Strict JSON reading for qualification documents: a document tree plus a parser that rejects
// duplicate keys, NaN/Infinity, numbers that overflow or do not round-trip through a double,
// invalid UTF-8 and trailing content, naming the JSON path of the offending value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::qualify {

enum class JsonType { kNull, kBool, kNumber, kString, kArray, kObject };
const char* json_type_name(JsonType type);

struct JsonValue {
  // Declared here, defaulted in the .cc: clang with libstdc++ cannot judge an implicit default
  // constructor while std::pair<std::string, JsonValue> below is still incomplete.
  JsonValue();

  JsonType type = JsonType::kNull;
  bool boolean = false;
  double number = 0.0;
  // True when the number was written without fraction or exponent and fits in int64.
  bool is_integer = false;
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in document order, keys unique

  bool is_null() const { return type == JsonType::kNull; }
  bool is_object() const { return type == JsonType::kObject; }
  bool is_array() const { return type == JsonType::kArray; }
  bool is_string() const { return type == JsonType::kString; }
  bool is_number() const { return type == JsonType::kNumber; }
  bool is_bool() const { return type == JsonType::kBool; }
  // nullptr when this is not an object or has no such key.
  const JsonValue* find(std::string_view key) const;

  static JsonValue make_null() { return {}; }
  static JsonValue make_bool(bool b);
  static JsonValue make_number(double d);
  static JsonValue make_integer(int64_t i);
  static JsonValue make_string(std::string s);
  static JsonValue make_object();
  static JsonValue make_array();
  // Object building: sets (or replaces) `key`, keeping first-insertion order.
  JsonValue& set(std::string key, JsonValue value);
};

// Deep equality; numbers compare by value, objects ignore key order.
bool json_equal(const JsonValue& a, const JsonValue& b);

// Parses one complete document. Errors are kFormatError with a message "PATH: reason".
Result<JsonValue> parse_strict_json(std::string_view text);

// Reads and parses a file; the message names the file.
Result<JsonValue> read_strict_json_file(const std::string& path);

// JSON text (keys in document order; numbers in shortest round-trip form); compact when
// indent is 0, otherwise pretty-printed with that many spaces per level.
std::string to_json_text(const JsonValue& value, int indent = 0);

// "$" + ".key" for identifier-like keys, "[\"key\"]" otherwise.
std::string json_path_key(const std::string& parent, std::string_view key);
std::string json_path_index(const std::string& parent, size_t index);

}  // namespace kiln::qualify
