// FieldReader: typed, range-checked reads of one JSON object's fields for the API's request
// parsers. The first problem is kept as an ApiError naming the field by its full path
// ("messages[2].role"); later reads are skipped once one has failed.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace kiln {

using Json = nlohmann::ordered_json;

class FieldReader {
 public:
  // `path` is the object's own path ("" for the body); `known` lists every accepted key, and
  // any other key is an error naming it.
  FieldReader(const Json& object, std::string path, const std::set<std::string>& known);

  bool ok() const { return !error_; }
  const std::optional<ApiError>& error() const { return error_; }
  void fail(const std::string& field, const std::string& message);
  std::string path(const std::string& field) const;  // "<object path>.<field>"

  // The field if present and not null.
  const Json* get(const std::string& field) const;
  std::optional<bool> boolean(const std::string& field);
  std::optional<int64_t> integer(const std::string& field, int64_t lo, int64_t hi);
  std::optional<double> number(const std::string& field, double lo, double hi, bool lo_open = false);
  std::optional<std::string> string(const std::string& field);

 private:
  const Json& object_;
  std::string path_;
  std::optional<ApiError> error_;
};

}  // namespace kiln
