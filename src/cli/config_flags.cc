#include "cli/config_flags.h"

#include "config/config_schema.h"

namespace kiln::cli {

namespace {

// "server.port: TCP port ..." : a shorthand's help names the key it sets.
std::string help_for(const char* key) {
  const ConfigField* f = find_config_field(key);
  std::string help = std::string(key) + ": " + std::string(f->help);
  if (std::string c = f->constraint(); !c.empty()) help += " (" + c + ")";
  return help;
}

}  // namespace

void add_config_flags(CLI::App& cmd, ConfigFlags& flags) {
  cmd.add_option("--config", flags.config_path,
                 "TOML configuration file (default: $KILN_CONFIG, else ./kiln.toml when it exists)");
  // trigger_on_parse runs each callback as its flag is met, so overrides keep command-line order.
  cmd.add_option_function<std::string>(
         "--set",
         [&flags](const std::string& text) {
           const size_t eq = text.find('=');
           flags.overrides.push_back({text.substr(0, eq), text.substr(eq + 1), ""});
         },
         "Set any configuration key, e.g. --set server.port=9000 (repeatable; `kiln config --markdown` lists the keys)")
      ->type_name("KEY=VALUE")
      ->trigger_on_parse()
      ->check([](const std::string& text) -> std::string {
        const size_t eq = text.find('=');
        if (eq == std::string::npos || eq == 0) return "expected KEY=VALUE, got '" + text + "'";
        return "";
      });
  const std::pair<const char*, const char*> shorthands[] = {
      {"--host", "server.host"},     {"--port", "server.port"},       {"--model", "model.path"},
      {"--backend", "model.backend"}, {"--profile", "server.profile"}, {"--api-key", "server.api_key"},
      {"--api-key-file", "server.api_key_file"},
  };
  for (auto [flag, key] : shorthands) {
    cmd.add_option_function<std::string>(
           flag, [&flags, flag = flag, key = key](const std::string& v) { flags.overrides.push_back({key, v, flag}); },
           help_for(key))
        ->type_name(find_config_field(key)->type == FieldType::kInteger ? "INT" : "TEXT")
        ->trigger_on_parse();
  }
}

Result<ResolvedConfig> resolve(const ConfigFlags& flags) {
  ConfigInputs in;
  in.config_path = flags.config_path;
  in.env = kiln_environment();
  in.flags = flags.overrides;
  return load_config(in);
}

}  // namespace kiln::cli
