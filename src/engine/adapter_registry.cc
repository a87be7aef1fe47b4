#include "engine/adapter_registry.h"

#include <algorithm>

#include "core/names.h"

namespace kiln {

Status AdapterRegistry::check_name(const std::string& name) {
  KILN_RETURN_IF_ERROR(check_folder_name("adapter name", name));
  if (is_reserved_adapter_name(name))
    return invalid_argument("adapter name '" + name + "' is kept for Kiln's own folders (names ending in '.checkpoints' "
                            "or starting with 'post-eval.')");
  return {};
}

void AdapterRegistry::set_limits(int64_t count, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_count_ = count;
  max_bytes_ = bytes;
}

Result<LoadedAdapter> AdapterRegistry::load(const std::string& name, const std::string& dir, std::vector<std::string>* evicted) {
  KILN_RETURN_IF_ERROR(check_folder_name("adapter name", name));  // Kiln's own names load too
  // Read, validated and uploaded outside the lock: requests keep resolving the old entry meanwhile.
  auto host = HostLoraAdapter::read(dir, model_);
  if (!host.ok()) return host.status().with_context("adapter '" + name + "' from " + dir);
  auto adapter = run_on_device(run_on_device_, [&] { return LoraAdapter::upload(*host, storage_); });
  if (!adapter.ok()) return adapter.status().with_context("adapter '" + name + "' from " + dir + ": upload");
  LoadedAdapter e{name, std::make_shared<const LoraAdapter>(std::move(adapter).value()), 0, dir};
  std::lock_guard<std::mutex> lock(mu_);
  // What stays loaded beside the new adapter (the one it replaces goes), within the limits:
  // the least recently used others go first; the default never does.
  auto over = [&](int64_t count, int64_t bytes) {
    return (max_count_ > 0 && count > max_count_) || (max_bytes_ > 0 && bytes > max_bytes_);
  };
  int64_t count = 1, bytes = e.adapter->bytes();
  std::vector<std::pair<uint64_t, std::string>> candidates;
  for (const auto& [n, a] : loaded_) {
    if (n == name) continue;
    ++count;
    bytes += a.adapter->bytes();
    if (n != default_) candidates.emplace_back(used_[n], n);
  }
  std::sort(candidates.begin(), candidates.end());
  std::vector<std::string> gone;
  for (const auto& [when, n] : candidates) {
    if (!over(count, bytes)) break;
    --count;
    bytes -= loaded_.at(n).adapter->bytes();
    gone.push_back(n);
  }
  if (over(count, bytes))
    return resource_exhausted("adapter '" + name + "' (" + std::to_string(e.adapter->bytes()) + " bytes) does not fit: " +
                              "server.max_loaded_adapters is " + std::to_string(max_count_) +
                              " and server.max_adapter_memory_bytes " + std::to_string(max_bytes_) +
                              ", and only the default adapter is left to keep");
  for (const std::string& n : gone) {
    loaded_.erase(n);
    used_.erase(n);
  }
  if (evicted) *evicted = gone;
  e.revision = ++revisions_[name];
  loaded_[name] = e;
  used_[name] = ++clock_;
  return e;
}

Status AdapterRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (loaded_.erase(name) == 0) return not_found("adapter '" + name + "' is not loaded");
  used_.erase(name);
  if (default_ == name) default_.clear();
  return {};
}

Status AdapterRegistry::set_default(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!name.empty() && loaded_.count(name) == 0)
    return not_found("adapter '" + name + "' is not loaded, so it cannot be the default");
  default_ = name;
  return {};
}

std::string AdapterRegistry::default_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return default_;
}

std::optional<LoadedAdapter> AdapterRegistry::resolve_default() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (default_.empty()) return std::nullopt;
  used_[default_] = ++clock_;
  return loaded_.at(default_);
}

Result<LoadedAdapter> AdapterRegistry::resolve(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(name);
  if (it == loaded_.end()) {
    std::string names;
    for (const auto& [n, _] : loaded_) names += (names.empty() ? "" : ", ") + n;
    return not_found("adapter '" + name + "' is not loaded (" + (names.empty() ? "no adapters are loaded" : "loaded: " + names) + ")");
  }
  used_[name] = ++clock_;
  return it->second;
}

std::vector<LoadedAdapter> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LoadedAdapter> out;
  for (const auto& [_, e] : loaded_) out.push_back(e);
  return out;
}

}  // namespace kiln
