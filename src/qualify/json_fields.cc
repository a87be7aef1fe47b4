#include "qualify/json_fields.h"

#include <algorithm>

namespace kiln::qualify {

namespace {

std::string describe(const JsonValue& v) { return json_type_name(v.type); }

}  // namespace

bool check_object(const JsonValue& value, const std::string& path, std::initializer_list<std::string_view> keys,
                  Issues& issues) {
  if (!value.is_object()) {
    issues.add(path, "type", "expected an object, found " + describe(value));
    return false;
  }
  for (const auto& [k, v] : value.object) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      issues.add(json_path_key(path, k), "unknown-key", "key \"" + k + "\" is not part of this object's schema");
    }
  }
  for (std::string_view k : keys) {
    if (value.find(k) == nullptr) {
      issues.add(json_path_key(path, k), "missing-key", "required key \"" + std::string(k) + "\" is missing");
    }
  }
  return true;
}

std::optional<std::string> read_string(const JsonValue& obj, const std::string& path, std::string_view key,
                                       Issues& issues) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    issues.add(json_path_key(path, key), "type", "expected a string, found " + describe(*v));
    return std::nullopt;
  }
  return v->string;
}

std::optional<std::string> read_nullable_string(const JsonValue& obj, const std::string& path, std::string_view key,
                                                Issues& issues) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  return read_string(obj, path, key, issues);
}

std::optional<bool> read_bool(const JsonValue& obj, const std::string& path, std::string_view key, Issues& issues) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_bool()) {
    issues.add(json_path_key(path, key), "type", "expected a boolean, found " + describe(*v));
    return std::nullopt;
  }
  return v->boolean;
}

std::optional<int64_t> read_integer(const JsonValue& obj, const std::string& path, std::string_view key,
                                    Issues& issues) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number() || !v->is_integer) {
    issues.add(json_path_key(path, key), "type",
               "expected an integer, found " + (v->is_number() ? to_json_text(*v) : describe(*v)));
    return std::nullopt;
  }
  return v->integer;
}

std::optional<double> read_number(const JsonValue& obj, const std::string& path, std::string_view key,
                                  Issues& issues) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) {
    issues.add(json_path_key(path, key), "type", "expected a number, found " + describe(*v));
    return std::nullopt;
  }
  return v->number;
}

const JsonValue* read_array(const JsonValue& obj, const std::string& path, std::string_view key, Issues& issues) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) {
    issues.add(json_path_key(path, key), "type", "expected an array, found " + describe(*v));
    return nullptr;
  }
  return v;
}

std::vector<std::string> read_string_array(const JsonValue& obj, const std::string& path, std::string_view key,
                                           Issues& issues) {
  std::vector<std::string> out;
  const JsonValue* arr = read_array(obj, path, key, issues);
  if (arr == nullptr) return out;
  std::string arr_path = json_path_key(path, key);
  for (size_t i = 0; i < arr->array.size(); ++i) {
    const JsonValue& e = arr->array[i];
    if (!e.is_string()) {
      issues.add(json_path_index(arr_path, i), "type", "expected a string, found " + describe(e));
      continue;
    }
    out.push_back(e.string);
  }
  return out;
}

void check_sorted_unique(const std::vector<std::string>& items, const std::string& array_path, Issues& issues) {
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i] == items[i - 1] ||
        std::find(items.begin(), items.begin() + static_cast<long>(i), items[i]) != items.begin() + static_cast<long>(i)) {
      issues.add(json_path_index(array_path, i), "unique", "\"" + items[i] + "\" appears more than once");
      return;
    }
    if (items[i] < items[i - 1]) {
      issues.add(json_path_index(array_path, i), "sorted",
                 "\"" + items[i] + "\" must not come after \"" + items[i - 1] + "\" (the list is sorted)");
      return;
    }
  }
}

}  // namespace kiln::qualify
