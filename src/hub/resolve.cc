#include "hub/resolve.h"

#include <unistd.h>

#include <filesystem>

#include "hub/hf_cache.h"
#include "hub/repo_ref.h"
#include "model/model_files.h"

namespace kiln::hub {

namespace fs = std::filesystem;

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool path_like(const std::string& s) {
  return s[0] == '/' || s[0] == '~' || s.rfind("./", 0) == 0 || s.rfind("../", 0) == 0 || s == "." || s == ".." ||
         s.find('/') == std::string::npos;
}

}  // namespace

Result<ResolvedModel> resolve_model(const std::string& spec, const HubSettings& settings, const ResolveOptions& options) {
  if (spec.empty()) return invalid_argument("the model is empty: name a checkpoint folder or a Hub model ORG/NAME[@REVISION]");
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return ResolvedModel{spec, "", ""};
  if (fs::exists(spec, ec)) return invalid_argument("model '" + spec + "' is a file: name the checkpoint folder that holds it");
  if (path_like(spec))
    return not_found("model '" + spec + "': no such folder (a Hub model is named ORG/NAME[@REVISION])");
  auto parsed = parse_repo_ref(spec);
  if (!parsed.ok())
    return not_found("model '" + spec + "' is no folder here and no Hub name: " + parsed.status().message());
  const RepoRef& ref = *parsed;
  std::FILE* log = options.pull.log;
  HfCache cache(settings.cache_dir);

  std::vector<std::string> missing;
  if (auto commit = cache.commit_of(ref); commit.ok() && fs::is_directory(cache.snapshot_dir(ref, *commit), ec)) {
    const std::string dir = cache.snapshot_dir(ref, *commit);
    ServableCheck check = check_servable(dir);
    if (check.missing.empty()) {
      // Optional files: present, or known absent by a .no_exist marker; any other is unknown.
      std::vector<std::string> unknown;
      for (const std::string& f : optional_serving_files())
        if (!fs::exists(dir + "/" + f, ec) && !cache.known_absent(ref, *commit, f)) unknown.push_back(f);
      if (!unknown.empty() && !settings.offline && options.allow_download) {
        // Asked of the Hub once, at the cached commit (a branch is not moved by this).
        RepoRef at_commit = ref;
        at_commit.revision = *commit;
        PullOptions quick = options.pull;
        quick.verify_cached = false;
        if (log) std::fprintf(log, "kiln: %s: asking %s about %s (neither cached nor known to be absent)\n",
                              ref.label().c_str(), settings.endpoint.c_str(), joined(unknown).c_str());
        auto filled = pull_model(settings, at_commit, quick);
        if (filled.ok()) return ResolvedModel{dir, ref.id(), *commit};
        if (log) std::fprintf(log, "kiln: %s: %s\n", ref.label().c_str(), filled.status().message().c_str());
      }
      if (log) {
        std::fprintf(log, "kiln: %s: commit %s from the Hugging Face cache (%s)\n", ref.label().c_str(), commit->c_str(), dir.c_str());
        if (!unknown.empty())
          std::fprintf(log, "kiln: %s: served without %s (not cached, not known to be absent)\n", ref.label().c_str(),
                       joined(unknown).c_str());
      }
      return ResolvedModel{dir, ref.id(), *commit};
    }
    missing = check.missing;
  }
  const std::string what = missing.empty() ? ref.label() + " is not in the Hugging Face cache (" + settings.cache_dir + ")"
                                           : ref.label() + " is incomplete in the Hugging Face cache (" + settings.cache_dir +
                                                 "): missing " + joined(missing);
  if (settings.offline)
    return failed_precondition("HF_HUB_OFFLINE is set and " + what +
                               ": run `kiln model pull " + ref.label() + "` where the Hub is reachable, or unset HF_HUB_OFFLINE");
  if (!options.allow_download) return not_found(what + ": run `kiln model pull " + ref.label() + "`");
  if (log) std::fprintf(log, "kiln: %s: fetching it from %s\n", what.c_str(), settings.endpoint.c_str());
  auto fetched = pull_model(settings, ref, options.pull);
  if (!fetched.ok()) return fetched.status().with_context("model '" + spec + "' (no such folder here, so a Hub name)");
  const PullResult& pulled = *fetched;
  ServableCheck check = check_servable(pulled.snapshot_dir);
  if (!check.missing.empty())
    return not_found(ref.label() + " (commit " + pulled.commit + ") lacks files serving needs: " + joined(check.missing));
  return ResolvedModel{pulled.snapshot_dir, ref.id(), pulled.commit};
}

Result<ResolvedModel> resolve_model_from_env(const std::string& spec) {
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return ResolvedModel{spec, "", ""};  // no environment needed
  KILN_ASSIGN_OR_RETURN(HubSettings settings, HubSettings::from_env());
  ResolveOptions o;
  o.pull.terminal = ::isatty(STDERR_FILENO) != 0;
  return resolve_model(spec, settings, o);
}

}  // namespace kiln::hub
