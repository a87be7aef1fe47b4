#include "server/request_fields.h"

#include <cmath>
#include <sstream>

namespace kiln {

namespace {

std::string type_name(const Json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

FieldReader::FieldReader(const Json& object, std::string path, const std::set<std::string>& known)
    : object_(object), path_(std::move(path)) {
  if (!object_.is_object()) {
    error_ = ApiError::invalid(path_, (path_.empty() ? std::string("the request body") : path_) +
                                          " must be a JSON object, got " + type_name(object_));
    return;
  }
  for (const auto& [key, value] : object_.items())
    if (!known.count(key)) {
      fail(key, "unknown field '" + this->path(key) + "'");
      return;
    }
}

std::string FieldReader::path(const std::string& field) const { return path_.empty() ? field : path_ + "." + field; }

void FieldReader::fail(const std::string& field, const std::string& message) {
  if (!error_) error_ = ApiError::invalid(path(field), message);
}

const Json* FieldReader::get(const std::string& field) const {
  if (error_) return nullptr;
  auto it = object_.find(field);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> FieldReader::boolean(const std::string& field) {
  const Json* v = get(field);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    fail(field, path(field) + " must be a boolean, got " + type_name(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<int64_t> FieldReader::integer(const std::string& field, int64_t lo, int64_t hi) {
  const Json* v = get(field);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_unsigned()) {
    x = v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e18) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    fail(field, path(field) + " must be an integer, got " + (v->is_number() ? v->dump() : type_name(*v)));
    return std::nullopt;
  }
  if (x < lo || x > hi) {
    fail(field, path(field) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                    std::to_string(x));
    return std::nullopt;
  }
  return x;
}

std::optional<double> FieldReader::number(const std::string& field, double lo, double hi, bool lo_open) {
  const Json* v = get(field);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    fail(field, path(field) + " must be a number, got " + type_name(*v));
    return std::nullopt;
  }
  const double x = v->get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
    fail(field, path(field) + " must be in " + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "], got " + num(x));
    return std::nullopt;
  }
  return x;
}

std::optional<std::string> FieldReader::string(const std::string& field) {
  const Json* v = get(field);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    fail(field, path(field) + " must be a string, got " + type_name(*v));
    return std::nullopt;
  }
  return v->get<std::string>();
}

}  // namespace kiln
