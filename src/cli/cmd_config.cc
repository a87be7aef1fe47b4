// `kiln config`: the effective configuration, each value with its source (default, file, env,
// flag), as text or JSON; `--markdown` prints the reference of every key from the schema.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "config/config_reference.h"
#include "config/config_render.h"

namespace kiln::cli {

namespace {

struct ConfigOpts {
  ConfigFlags flags;
  bool json = false, markdown = false;
};

Status run(const ConfigOpts& o) {
  if (o.markdown) {
    std::printf("%s", config_reference_markdown().c_str());
    return {};
  }
  KILN_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve(o.flags));
  if (o.json) std::printf("%s\n", config_to_json(resolved).dump(2).c_str());
  else std::printf("%s", config_to_text(resolved).c_str());
  return {};
}

}  // namespace

void add_config_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "config", "Print the effective configuration, each value with its source (default, file, env, flag)");
  auto o = std::make_shared<ConfigOpts>();
  add_config_flags(*cmd, o->flags);
  auto* json = cmd->add_flag("--json", o->json, "Print JSON ({section: {key: {value, source}}}) instead of text");
  cmd->add_flag("--markdown", o->markdown, "Print the reference of every key (type, default, allowed values, meaning) as Markdown")
      ->excludes(json);
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
