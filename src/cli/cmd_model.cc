// `kiln model init`: write a random-weight checkpoint of a named shape. `kiln model pull | list |
// rm`: Hub models in the Hugging Face cache (hub/).
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/status.h"
#include "hub/hf_cache.h"
#include "hub/pull.h"
#include "hub/pull_progress.h"
#include "hub/repo_ref.h"
#include "model/init.h"
#include "model/model_files.h"

namespace kiln::cli {

namespace {

constexpr const char* kHubFooter =
    "Hub models live in the Hugging Face cache as huggingface_hub lays it out ($HF_HUB_CACHE, else $HF_HOME/hub,\n"
    "else ~/.cache/huggingface/hub), shared with transformers. HF_ENDPOINT names a mirror (default\n"
    "https://huggingface.co); HF_TOKEN (or the token file of `huggingface-cli login`) is sent to it for gated and\n"
    "private models, never to the CDN it redirects to; HF_HUB_OFFLINE=1 forbids the network. SSL_CERT_FILE names\n"
    "the CA bundle a mirror's certificate is checked against. HTTPS_PROXY, HTTP_PROXY and NO_PROXY (or their\n"
    "lower-case forms) route requests through an http:// proxy, as curl does (docs/models.md).";

Status pull(const std::string& name, int jobs) {
  KILN_ASSIGN_OR_RETURN(hub::RepoRef ref, hub::parse_repo_ref(name));
  KILN_ASSIGN_OR_RETURN(hub::HubSettings settings, hub::HubSettings::from_env());
  hub::PullOptions o;
  o.jobs = jobs;
  o.terminal = ::isatty(STDERR_FILENO) != 0;
  KILN_ASSIGN_OR_RETURN(hub::PullResult r, hub::pull_model(settings, ref, o));
  std::fprintf(stderr, "kiln: %s: commit %s, %zu files (%d fetched, %s)\n", ref.label().c_str(), r.commit.c_str(),
               r.files.size(), r.fetched, hub::format_bytes(r.fetched_bytes).c_str());
  ServableCheck check = check_servable(r.snapshot_dir);
  if (!check.servable) std::fprintf(stderr, "kiln: note: Kiln cannot serve it: %s\n", check.problem.c_str());
  std::printf("%s\n", r.snapshot_dir.c_str());
  return {};
}

Status list(bool as_json) {
  KILN_ASSIGN_OR_RETURN(hub::HubSettings settings, hub::HubSettings::from_env());
  hub::HfCache cache(settings.cache_dir);
  KILN_ASSIGN_OR_RETURN(std::vector<hub::HfCache::Repo> repos, cache.list());
  nlohmann::json out = nlohmann::json::array();
  if (!as_json) std::printf("%-40s %-12s %-16s %10s  %s\n", "MODEL", "COMMIT", "REFS", "SIZE", "SERVABLE");
  for (const auto& r : repos) {
    for (const auto& rev : r.revisions) {
      const ServableCheck c = check_servable(rev.dir);
      std::string refs;
      for (const auto& x : rev.refs) refs += (refs.empty() ? "" : ",") + x;
      if (as_json) {
        out.push_back({{"model", r.id}, {"commit", rev.commit}, {"refs", rev.refs}, {"bytes", rev.bytes},
                       {"path", rev.dir}, {"architecture", c.architecture}, {"servable", c.servable},
                       {"problem", c.problem}, {"missing", c.missing}});
      } else {
        std::printf("%-40s %-12s %-16s %10s  %s\n", r.id.c_str(), rev.commit.substr(0, 12).c_str(),
                    refs.empty() ? "-" : refs.c_str(), hub::format_bytes(rev.bytes).c_str(),
                    c.servable ? "yes" : ("no: " + c.problem).c_str());
      }
    }
    if (r.revisions.empty() && !as_json)
      std::printf("%-40s %-12s %-16s %10s  %s\n", r.id.c_str(), "-", "-", hub::format_bytes(r.bytes).c_str(),
                  "no: no snapshot (an interrupted download?)");
  }
  if (as_json) std::printf("%s\n", out.dump(2).c_str());
  else if (repos.empty()) std::printf("(no models in %s)\n", settings.cache_dir.c_str());
  return {};
}

Status remove(const std::string& name) {
  KILN_ASSIGN_OR_RETURN(hub::RepoRef ref, hub::parse_repo_ref(name));
  KILN_ASSIGN_OR_RETURN(hub::HubSettings settings, hub::HubSettings::from_env());
  KILN_ASSIGN_OR_RETURN(uint64_t freed, hub::HfCache(settings.cache_dir).remove(ref));
  std::printf("removed %s from %s (%s freed)\n", ref.label().c_str(), settings.cache_dir.c_str(),
              hub::format_bytes(freed).c_str());
  return {};
}

}  // namespace

void add_model_command(CLI::App& app) {
  auto* model = app.add_subcommand("model", "Model utilities: Hub models in the Hugging Face cache, random-weight checkpoints");
  model->require_subcommand(1);
  auto* init = model->add_subcommand(
      "init", "Write a random-weight checkpoint (config.json + model.safetensors) in the HF layout");
  struct Opts {
    std::string preset, dtype = "bf16", out;
    uint64_t seed = 0;
  };
  auto opts = std::make_shared<Opts>();
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  init->add_option("--preset", opts->preset, "Shape: " + presets)->required();
  init->add_option("--seed", opts->seed, "Random seed (same seed, same weights)")->capture_default_str();
  init->add_option("--dtype", opts->dtype, "Weight dtype: bf16, f16 or f32")->capture_default_str();
  init->add_option("--out", opts->out, "Output directory (created if missing)")->required();
  init->callback([opts] {
    auto config = preset_config(opts->preset);
    if (!config.ok()) return report(config.status());
    auto dtype = parse_dtype(opts->dtype);
    if (!dtype || !is_float(*dtype)) return report(invalid_argument("--dtype '" + opts->dtype + "': expected bf16, f16 or f32"));
    InitOptions io;
    io.seed = opts->seed;
    io.dtype = *dtype;
    report(write_random_checkpoint(config.value(), opts->out, io));
    if (exit_code == 0) std::printf("%s\n", opts->out.c_str());
  });

  auto name = std::make_shared<std::string>();
  auto jobs = std::make_shared<int>(4);
  auto* pull_cmd = model->add_subcommand(
      "pull", "Fetch a Hub model's serving files (config, tokenizer, chat template, safetensors weights) into the "
              "Hugging Face cache; an interrupted pull resumes. Prints the snapshot folder");
  pull_cmd->add_option("name", *name, "ORG/NAME[@REVISION] (a branch, tag or commit; default main)")->required();
  pull_cmd->add_option("--jobs", *jobs, "Weight shards fetched at once")->check(CLI::Range(1, 16))->capture_default_str();
  pull_cmd->footer(kHubFooter);
  pull_cmd->callback([name, jobs] { report(pull(*name, *jobs)); });

  auto as_json = std::make_shared<bool>(false);
  auto* list_cmd = model->add_subcommand(
      "list", "List the models in the Hugging Face cache: commit, refs, size, and whether Kiln can serve them (and why not)");
  list_cmd->add_flag("--json", *as_json, "One JSON array instead of the table");
  list_cmd->footer(kHubFooter);
  list_cmd->callback([as_json] { report(list(*as_json)); });

  auto rm_name = std::make_shared<std::string>();
  auto* rm_cmd = model->add_subcommand(
      "rm", "Remove a model from the Hugging Face cache: all of it, or with @REVISION that snapshot and the blobs only it used");
  rm_cmd->add_option("name", *rm_name, "ORG/NAME[@REVISION]")->required();
  rm_cmd->footer(kHubFooter);
  rm_cmd->callback([rm_name] { report(remove(*rm_name)); });
}

}  // namespace kiln::cli
