// What `--model` (and model.path in kiln.toml) names: a checkpoint folder, or a Hub model
// ORG/NAME[@REVISION] found in the Hugging Face cache and fetched into it when missing. An
// existing folder always wins over a name that reads the same.
#pragma once

#include <cstdio>
#include <string>

#include "core/status.h"
#include "hub/hub_settings.h"
#include "hub/pull.h"

namespace kiln::hub {

struct ResolvedModel {
  std::string dir;      // the folder to read (a snapshot folder for a name)
  std::string repo_id;  // "ORG/NAME" when a Hub name was given, else ""
  std::string commit;   // the snapshot's commit when a Hub name was given
};

struct ResolveOptions {
  bool allow_download = true;  // fetch what the cache lacks (never under HF_HUB_OFFLINE)
  PullOptions pull;            // its log also receives the one-line notes of resolution
};

Result<ResolvedModel> resolve_model(const std::string& spec, const HubSettings& settings, const ResolveOptions& options);

// The environment's settings and a pull that reports on stderr (redrawn when it is a terminal).
Result<ResolvedModel> resolve_model_from_env(const std::string& spec);

}  // namespace kiln::hub
