#include "config/config_render.h"

#include "config/config_schema.h"

namespace kiln {

namespace {

// A secret shows as "<set>" or "" (unset), never its value.
ConfigValue shown(const ConfigField& f, const KilnConfig& c) {
  ConfigValue v = f.get(c);
  if (f.secret) v = std::string(std::get<std::string>(v).empty() ? "" : "<set>");
  return v;
}

nlohmann::json value_json(const ConfigValue& v) {
  return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
}

const FieldOrigin& origin_of(const ResolvedConfig& r, const ConfigField& f) {
  static const FieldOrigin kDefault;
  auto it = r.origins.find(f.name());
  return it == r.origins.end() ? kDefault : it->second;
}

}  // namespace

nlohmann::json config_to_json(const ResolvedConfig& resolved) {
  nlohmann::json out = nlohmann::json::object();
  for (const ConfigField& f : config_schema()) {
    const FieldOrigin& o = origin_of(resolved, f);
    nlohmann::json entry = {{"value", value_json(shown(f, resolved.config))}, {"source", config_source_name(o.source)}};
    if (o.source != ConfigSource::kDefault) entry[config_source_name(o.source)] = o.where;
    out[std::string(f.section)][std::string(f.key)] = std::move(entry);
  }
  return out;
}

std::string config_to_text(const ResolvedConfig& resolved) {
  std::string out;
  for (const ConfigField& f : config_schema()) {
    const FieldOrigin& o = origin_of(resolved, f);
    out += f.name() + " = " + format_config_value(shown(f, resolved.config)) + "  (" + config_source_name(o.source);
    if (!o.where.empty()) out += " " + o.where;
    out += ")\n";
  }
  return out;
}

}  // namespace kiln
