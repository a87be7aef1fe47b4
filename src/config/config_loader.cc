#include "config/config_loader.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <toml++/toml.h>
#include <tuple>

#include "config/config_schema.h"

extern char** environ;

namespace kiln {

namespace {

const char* toml_type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a bool";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

const char* expected_toml_type(FieldType t) {
  switch (t) {
    case FieldType::kInteger: return "an integer";
    case FieldType::kFloat: return "a number";
    case FieldType::kBool: return "a bool";
    default: return "a string";
  }
}

// The node as a value of the field's type; integers are accepted for floats (memory_fraction = 1).
std::optional<ConfigValue> toml_value(const toml::node& n, FieldType t) {
  switch (t) {
    case FieldType::kInteger:
      if (const auto* v = n.as_integer()) return ConfigValue(v->get());
      break;
    case FieldType::kFloat:
      if (const auto* v = n.as_floating_point()) return ConfigValue(v->get());
      if (const auto* v = n.as_integer()) return ConfigValue(static_cast<double>(v->get()));
      break;
    case FieldType::kBool:
      if (const auto* v = n.as_boolean()) return ConfigValue(v->get());
      break;
    case FieldType::kString:
    case FieldType::kEnum:
      if (const auto* v = n.as_string()) return ConfigValue(v->get());
      break;
  }
  return std::nullopt;
}

std::string join(const std::vector<std::string_view>& items, std::string_view sep) {
  std::string out;
  for (std::string_view s : items) out += (out.empty() ? "" : std::string(sep)) + std::string(s);
  return out;
}

std::vector<std::string_view> keys_of(std::string_view section) {
  std::vector<std::string_view> out;
  for (const ConfigField& f : config_schema())
    if (f.section == section) out.push_back(f.key);
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The longest schema section whose KILN_<SECTION>_ prefix `name` starts with, or "".
std::string_view env_section(std::string_view name) {
  std::string_view best;
  for (std::string_view s : config_sections()) {
    const std::string prefix = "KILN_" + upper(s) + "_";
    if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix && s.size() > best.size()) best = s;
  }
  return best;
}

// Accumulates the resolved values and every problem on the way. File problems carry their
// position so that they are listed in file order (toml++ tables iterate by key).
class Resolver {
 public:
  Resolver() {
    for (const ConfigField& f : config_schema()) out_.origins[f.name()] = FieldOrigin{};
  }

  void problem(std::string text) { problems_.push_back({0, 0, std::move(text)}); }

  // Checks the value against the field's constraints and, when it passes, records it.
  Status assign(const ConfigField& f, const ConfigValue& v, FieldOrigin origin) {
    KILN_RETURN_IF_ERROR(f.check(v));
    f.set(out_.config, v);
    out_.origins[f.name()] = std::move(origin);
    return {};
  }

  void read_file(const std::string& path);
  void read_env(const std::map<std::string, std::string>& env);
  void read_flags(const std::vector<FlagOverride>& flags);

  Result<ResolvedConfig> finish() && {
    if (problems_.empty()) return std::move(out_);
    std::string msg = "invalid configuration";
    if (problems_.size() == 1) return invalid_argument(msg + ": " + problems_[0].text);
    msg += " (" + std::to_string(problems_.size()) + " problems):";
    for (const Problem& p : problems_) msg += "\n  " + p.text;
    return invalid_argument(msg);
  }

 private:
  struct Problem {
    uint32_t line, column;
    std::string text;
  };

  std::string at(const std::string& path, const toml::source_region& r) const {
    if (r.begin.line == 0) return path;
    return path + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
  }
  void file_problem(const std::string& path, const toml::source_region& r, std::string text) {
    problems_.push_back({r.begin.line, r.begin.column, at(path, r) + ": " + std::move(text)});
  }

  ResolvedConfig out_;
  std::vector<Problem> problems_;
};

void Resolver::read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return problem(path + ": cannot read the configuration file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return file_problem(path, e.source(), "TOML syntax error: " + std::string(e.description()));
  }
  out_.file = path;
  const size_t first = problems_.size();
  for (const auto& [section_key, section_node] : root) {
    const std::string_view section = section_key.str();
    const auto& sections = config_sections();
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      if (section_node.is_table())
        file_problem(path, section_key.source(),
                     "unknown section [" + std::string(section) + "] (sections: " + join(sections, ", ") + ")");
      else
        file_problem(path, section_key.source(),
                     "unknown key " + std::string(section) + " at the top level (keys belong in a section: " +
                         join(sections, ", ") + ")");
      continue;
    }
    const toml::table* table = section_node.as_table();
    if (!table) {
      file_problem(path, section_node.source(),
                   std::string(section) + ": expected a table, got " + toml_type_name(section_node.type()));
      continue;
    }
    for (const auto& [key, node] : *table) {
      const std::string name = std::string(section) + "." + std::string(key.str());
      const ConfigField* f = find_config_field(name);
      if (!f) {
        file_problem(path, key.source(),
                     "unknown key " + name + " (keys of [" + std::string(section) + "]: " + join(keys_of(section), ", ") + ")");
        continue;
      }
      std::optional<ConfigValue> v = toml_value(node, f->type);
      if (!v) {
        file_problem(path, node.source(),
                     name + ": expected " + expected_toml_type(f->type) + ", got " + toml_type_name(node.type()));
        continue;
      }
      Status s = assign(*f, *v, FieldOrigin{ConfigSource::kFile, path});
      if (!s.ok()) file_problem(path, node.source(), name + ": " + s.message());
    }
  }
  std::stable_sort(problems_.begin() + static_cast<std::ptrdiff_t>(first), problems_.end(),
                   [](const Problem& a, const Problem& b) { return std::tie(a.line, a.column) < std::tie(b.line, b.column); });
}

void Resolver::read_env(const std::map<std::string, std::string>& env) {
  for (const auto& [name, text] : env) {
    const std::string_view section = env_section(name);
    if (section.empty()) continue;  // not configuration (KILN_CONFIG, KILN_HOME, ...)
    const std::string key = lower(std::string_view(name).substr(5 + section.size() + 1));
    const std::string field_name = std::string(section) + "." + key;
    const std::string where = "environment variable " + name;
    const ConfigField* f = find_config_field(field_name);
    if (f && f->env_var() != name) {
      problem(where + ": configuration variables are upper case: " + f->env_var());
      continue;
    }
    if (!f) {
      problem(where + ": unknown key " + field_name + " (keys of [" + std::string(section) + "]: " +
              join(keys_of(section), ", ") + ")");
      continue;
    }
    Result<ConfigValue> v = parse_config_value(f->type, text);
    Status s = v.ok() ? assign(*f, v.value(), FieldOrigin{ConfigSource::kEnv, name}) : v.status();
    if (!s.ok()) problem(where + ": " + f->name() + ": " + s.message());
  }
}

void Resolver::read_flags(const std::vector<FlagOverride>& flags) {
  for (const FlagOverride& o : flags) {
    const std::string spelled = o.flag.empty() ? "--set " + o.key : o.flag;
    const std::string where = "flag " + (o.flag.empty() ? "--set " + o.key + "=" + o.value : o.flag + " " + o.value);
    const ConfigField* f = find_config_field(o.key);
    if (!f) {
      problem(where + ": unknown key " + o.key);
      continue;
    }
    Result<ConfigValue> v = parse_config_value(f->type, o.value);
    Status s = v.ok() ? assign(*f, v.value(), FieldOrigin{ConfigSource::kFlag, spelled}) : v.status();
    if (!s.ok()) problem(where + ": " + f->name() + ": " + s.message());
  }
}

}  // namespace

std::map<std::string, std::string> kiln_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    if (entry.substr(0, 5) != "KILN_") continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return out;
}

bool is_config_env_var(std::string_view name) { return !env_section(name).empty(); }

Result<ResolvedConfig> load_config(const ConfigInputs& in) {
  namespace fs = std::filesystem;
  Resolver r;
  std::string path, named_by;
  if (!in.config_path.empty()) {
    path = in.config_path;
    named_by = "--config";
  } else if (auto it = in.env.find("KILN_CONFIG"); it != in.env.end() && !it->second.empty()) {
    path = it->second;
    named_by = "KILN_CONFIG";
  } else if (!in.default_file.empty()) {
    std::error_code ec;
    if (fs::exists(in.default_file, ec)) path = in.default_file;
  }
  if (!path.empty()) {
    std::error_code ec;
    if (!named_by.empty() && !fs::exists(path, ec))
      r.problem(path + " (named by " + named_by + "): configuration file does not exist");
    else if (fs::is_directory(path, ec))
      r.problem(path + ": is a directory, not a configuration file");
    else
      r.read_file(path);
  }
  r.read_env(in.env);
  r.read_flags(in.flags);
  return std::move(r).finish();
}

}  // namespace kiln
