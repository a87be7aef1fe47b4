#include "qualify/receipt_freshness.h"

#include <filesystem>

#include "qualify/workload.h"

namespace kiln::qualify {

namespace {

constexpr const char* kWorkloads = "qualification/workloads/";
constexpr const char* kRetired = "qualification/workloads/retired/";
constexpr size_t kNamedChanges = 5;

std::string names_of(const std::vector<std::string>& paths) {
  std::string out;
  for (size_t i = 0; i < paths.size() && i < kNamedChanges; ++i) out += (i ? ", " : "") + paths[i];
  if (paths.size() > kNamedChanges) out += " (+" + std::to_string(paths.size() - kNamedChanges) + " more)";
  return out;
}

const JsonValue* string_at(const JsonValue& obj, const char* key) {
  const JsonValue* v = obj.is_object() ? obj.find(key) : nullptr;
  return v != nullptr && v->is_string() ? v : nullptr;
}

}  // namespace

const char* currency_name(ReceiptCurrency c) {
  switch (c) {
    case ReceiptCurrency::kCurrent: return "current";
    case ReceiptCurrency::kStale: return "stale";
    case ReceiptCurrency::kUnknown: break;
  }
  return "unknown";
}

std::string workload_file(const GitRepo& repo, const std::string& workload_id) {
  if (workload_id.empty() || workload_id.find('/') != std::string::npos) return "";
  for (const char* folder : {kWorkloads, kRetired}) {
    const std::string rel = std::string(folder) + workload_id + ".json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(repo.root() + "/" + rel, ec)) return rel;
  }
  return "";
}

bool is_retired_workload(const std::string& relative_path) { return relative_path.rfind(kRetired, 0) == 0; }

ReceiptFreshness receipt_freshness(const Receipt& r, const GitRepo& repo, const std::string& until) {
  using C = ReceiptCurrency;
  const std::string at = r.git_commit.substr(0, 12);
  const std::string wl = workload_file(repo, r.workload_id);
  if (wl.empty()) return {C::kStale, "its workload " + r.workload_id + " is not in " + kWorkloads, {}};
  if (is_retired_workload(wl)) return {C::kStale, "its workload " + r.workload_id + " is retired (" + wl + ")", {}};
  Result<Workload> w = load_workload(repo.root() + "/" + wl);
  if (!w.ok()) return {C::kUnknown, wl + " does not load: " + w.status().message(), {}};
  if (w->digest != r.workload_sha256)
    return {C::kStale, "it ran other bytes of " + wl + " than the ones here", {wl}};
  Result<bool> known = repo.has_commit(r.git_commit);
  if (!known.ok()) return {C::kUnknown, known.status().message(), {}};
  if (!*known) return {C::kUnknown, "its commit " + at + " is not in this repository", {}};
  if (w->inputs.empty()) {
    // Without declared inputs any tracked file may matter: every one is an input.
    Result<std::vector<std::string>> all = repo.changed_paths(r.git_commit, until, {"**"});
    if (!all.ok()) return {C::kUnknown, all.status().message(), {}};
    std::vector<std::string> source;
    for (const std::string& p : *all)
      if (p.rfind("qualification/receipts/", 0) != 0 && p.rfind(".qualification/", 0) != 0) source.push_back(p);
    if (source.empty()) return {C::kCurrent, "", {}};
    return {C::kStale,
            std::to_string(source.size()) + " files changed since " + at + " (" + wl +
                " declares no inputs, so every file counts): " + names_of(source),
            source};
  }
  std::vector<std::string> globs = w->inputs;
  globs.push_back(wl);
  Result<std::vector<std::string>> changed = repo.changed_paths(r.git_commit, until, globs);
  if (!changed.ok()) return {C::kUnknown, changed.status().message(), {}};
  if (changed->empty()) return {C::kCurrent, "", {}};
  const size_t n = changed->size();
  return {C::kStale,
          std::to_string(n) + (n == 1 ? " input" : " inputs") + " changed since " + at + ": " + names_of(*changed),
          *changed};
}

bool recorded_without_gpu(const Receipt& r) {
  const JsonValue* backend = string_at(r.device, "backend");
  if (backend == nullptr) return false;
  if (backend->string == "cpu") return true;
  const JsonValue* driver = string_at(r.device, "driver");
  return backend->string == "vulkan" && driver != nullptr && driver->string.find("llvmpipe") != std::string::npos;
}

}  // namespace kiln::qualify
