// Schema checks shared by every strict qualification document: exact key sets and typed field
// reads that record an Issue (with the field's JSON path) instead of failing on the first one.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qualify/issues.h"
#include "qualify/strict_json.h"

namespace kiln::qualify {

// Records "type" when `value` is not an object, "unknown-key" for each key outside `keys` and
// "missing-key" for each of `keys` absent. Returns whether `value` is an object.
bool check_object(const JsonValue& value, const std::string& path, std::initializer_list<std::string_view> keys,
                  Issues& issues);

// Typed reads of obj[key] (obj already checked). A missing key returns nullopt silently (the
// key-set check reported it); a wrong type records "type" and returns nullopt.
std::optional<std::string> read_string(const JsonValue& obj, const std::string& path, std::string_view key,
                                       Issues& issues);
std::optional<bool> read_bool(const JsonValue& obj, const std::string& path, std::string_view key, Issues& issues);
std::optional<int64_t> read_integer(const JsonValue& obj, const std::string& path, std::string_view key,
                                    Issues& issues);
std::optional<double> read_number(const JsonValue& obj, const std::string& path, std::string_view key,
                                  Issues& issues);
// An array field; nullptr (after recording "type") when it is something else.
const JsonValue* read_array(const JsonValue& obj, const std::string& path, std::string_view key, Issues& issues);
// nullopt for JSON null (or missing); otherwise like read_string.
std::optional<std::string> read_nullable_string(const JsonValue& obj, const std::string& path, std::string_view key,
                                                Issues& issues);

// Reads an array of strings; non-strings record "type" and are skipped.
std::vector<std::string> read_string_array(const JsonValue& obj, const std::string& path, std::string_view key,
                                           Issues& issues);

// Records "sorted" / "unique" for the first element out of order / repeated.
void check_sorted_unique(const std::vector<std::string>& items, const std::string& array_path, Issues& issues);

}  // namespace kiln::qualify
