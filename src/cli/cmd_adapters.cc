// `kiln adapters list|load|unload|delete`: a client of a running `kiln serve`'s adapter routes
// (GET /v1/adapters, POST /v1/adapters/load, POST /v1/adapters/unload, DELETE /v1/adapters/{name}).
// Prints the server's JSON answer.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/server_client.h"

namespace kiln::cli {

namespace {

using nlohmann::json;

struct AdapterOpts {
  std::string url = kDefaultServerUrl, api_key_file, name, path;
  bool make_default = false;
};

Status call_and_print(const AdapterOpts& o, const std::string& method, const std::string& route, const json& body) {
  KILN_ASSIGN_OR_RETURN(ServerClient client, ServerClient::connect(o.url, o.api_key_file));
  KILN_ASSIGN_OR_RETURN(json answer, client.call(method, route, body));
  std::printf("%s\n", answer.dump(2).c_str());
  return {};
}

CLI::App* sub(CLI::App& parent, const std::string& name, const std::string& help, std::shared_ptr<AdapterOpts> o,
              bool named) {
  auto* cmd = parent.add_subcommand(name, help);
  cmd->add_option("--url", o->url, "The Kiln server")->capture_default_str();
  add_api_key_file_option(*cmd, o->api_key_file);
  if (named) cmd->add_option("name", o->name, "The adapter's name")->required();
  return cmd;
}

}  // namespace

void add_adapters_command(CLI::App& app) {
  auto* adapters = app.add_subcommand("adapters", "Manage the LoRA adapters of a running `kiln serve` (a client of /v1/adapters)");
  adapters->require_subcommand(1);

  auto list = std::make_shared<AdapterOpts>();
  sub(*adapters, "list", "List the loaded adapters (name, revision, rank, default)", list, false)
      ->callback([list] { report(call_and_print(*list, "GET", "/v1/adapters", nullptr)); });

  auto load = std::make_shared<AdapterOpts>();
  auto* l = sub(*adapters, "load", "Load (or reload, as the next revision) an adapter directory", load, true);
  l->add_option("--path", load->path, "A PEFT directory on the server's machine (default: <model.adapter_dir>/<name>)");
  l->add_flag("--default", load->make_default, "Also make it the default adapter (used by requests that name none)");
  l->callback([load] {
    json body = {{"name", load->name}};
    if (!load->path.empty()) body["path"] = load->path;
    if (load->make_default) body["default"] = true;
    report(call_and_print(*load, "POST", "/v1/adapters/load", body));
  });

  auto unload = std::make_shared<AdapterOpts>();
  sub(*adapters, "unload", "Unload an adapter (its files stay; unloading the default clears the default)", unload, true)
      ->callback([unload] { report(call_and_print(*unload, "POST", "/v1/adapters/unload", {{"name", unload->name}})); });

  auto del = std::make_shared<AdapterOpts>();
  sub(*adapters, "delete", "Unload an adapter and remove its directory from <model.adapter_dir>", del, true)
      ->callback([del] { report(call_and_print(*del, "DELETE", "/v1/adapters/" + del->name, nullptr)); });
}

}  // namespace kiln::cli
