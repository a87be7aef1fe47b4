#include "qualify/variables.h"

#include <algorithm>

#include "core/regex.h"

namespace kiln::qualify {
namespace {

std::string text_of(const JsonValue& v) {
  if (v.is_string()) return v.string;
  return to_json_text(v);
}

Result<JsonValue> typed_value(const Variable& var, const std::string& text) {
  std::string where = "--var " + var.name + "=" + text;
  if (var.type == "string") return JsonValue::make_string(text);
  if (var.type == "boolean") {
    if (text == "true") return JsonValue::make_bool(true);
    if (text == "false") return JsonValue::make_bool(false);
    return invalid_argument(where + ": a boolean is true or false");
  }
  Result<JsonValue> num = parse_strict_json(text);
  if (!num.ok() || !num->is_number()) return invalid_argument(where + ": not a JSON number");
  if (var.type == "integer" && !num->is_integer) return invalid_argument(where + ": not an integer");
  return num;
}

Status check_constraints(const Variable& var, const JsonValue& value, const std::string& text) {
  std::string where = "--var " + var.name + "=" + text;
  if (var.allowed_values &&
      std::none_of(var.allowed_values->begin(), var.allowed_values->end(),
                   [&](const JsonValue& a) { return json_equal(a, value); })) {
    std::string list;
    for (const JsonValue& a : *var.allowed_values) list += (list.empty() ? "" : ", ") + text_of(a);
    return invalid_argument(where + ": allowed values are " + list);
  }
  if (value.is_number() && var.minimum && value.number < *var.minimum) {
    return invalid_argument(where + ": below the minimum " + to_json_text(JsonValue::make_number(*var.minimum)));
  }
  if (value.is_number() && var.maximum && value.number > *var.maximum) {
    return invalid_argument(where + ": above the maximum " + to_json_text(JsonValue::make_number(*var.maximum)));
  }
  if (value.is_string() && var.pattern) {
    Result<Regex> r = Regex::compile(*var.pattern);
    Result<bool> m = r.ok() ? r->full_match(value.string) : Result<bool>(r.status());
    if (!m.ok()) return invalid_argument(where + ": " + m.status().message());
    if (!*m) return invalid_argument(where + ": does not match ^" + *var.pattern + "$");
  }
  return Status::ok_status();
}

}  // namespace

Result<std::pair<std::string, std::string>> parse_var_argument(const std::string& arg) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) return invalid_argument("--var " + arg + ": expected NAME=VALUE");
  return std::pair{arg.substr(0, eq), arg.substr(eq + 1)};
}

Result<ResolvedVariables> resolve_variables(const Workload& w,
                                            const std::vector<std::pair<std::string, std::string>>& given) {
  ResolvedVariables out;
  out.parameters = JsonValue::make_object();
  std::map<std::string, std::string> seen;
  for (const auto& [name, text] : given) {
    if (w.find_variable(name) == nullptr) {
      return invalid_argument("--var " + name + ": workload " + w.workload_id + " declares no such variable");
    }
    if (!seen.emplace(name, text).second) return invalid_argument("--var " + name + " is given twice");
  }
  for (const Variable& var : w.variables) {  // declared order is sorted by name
    JsonValue value;
    auto it = seen.find(var.name);
    if (it != seen.end()) {
      KILN_ASSIGN_OR_RETURN(value, typed_value(var, it->second));
      KILN_RETURN_IF_ERROR(check_constraints(var, value, it->second));
    } else if (var.required) {
      return invalid_argument("required variable " + var.name + " is missing: pass --var " + var.name + "=VALUE");
    } else {
      value = var.default_value;
    }
    out.placeholder_values[var.name] = text_of(value);
    out.parameters.set(var.name, value);
  }
  return out;
}

}  // namespace kiln::qualify
