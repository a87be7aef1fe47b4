#include "config/config_reference.h"

#include "config/config_schema.h"

namespace kiln {

std::string config_reference_markdown() {
  std::string out;
  for (std::string_view section : config_sections()) {
    out += "### [" + std::string(section) + "]\n\n";
    out += "| key | type | default | allowed | environment | meaning |\n";
    out += "|---|---|---|---|---|---|\n";
    for (const ConfigField& f : config_schema()) {
      if (f.section != section) continue;
      std::string allowed;
      for (char c : f.constraint()) allowed += c == '|' ? std::string("\\|") : std::string(1, c);  // GFM table cells
      out += "| `" + f.name() + "` | " + field_type_name(f.type) + " | `" + format_config_value(f.default_value()) +
             "` | " + (allowed.empty() ? "" : "`" + allowed + "`") + " | `" + f.env_var() + "` | " +
             std::string(f.help) + " |\n";
    }
    out += "\n";
  }
  return out;
}

}  // namespace kiln
