#include "engine/adapter_registry.h"

namespace kiln {

Status AdapterRegistry::check_name(const std::string& name) {
  if (name.empty() || name.size() > 64)
    return invalid_argument("adapter name '" + name + "' must be 1 to 64 characters, got " + std::to_string(name.size()));
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return invalid_argument("adapter name '" + name + "' may hold only letters, digits, '.', '_' and '-'");
  }
  // A leading '.' is reserved for staging and leftover folders (core/atomic_publish.h).
  if (name[0] == '.') return invalid_argument("adapter name '" + name + "' may not start with '.'");
  return {};
}

Result<LoadedAdapter> AdapterRegistry::load(const std::string& name, const std::string& dir) {
  KILN_RETURN_IF_ERROR(check_name(name));
  // Read and validated outside the lock: requests keep resolving the old entry meanwhile.
  auto adapter = LoraAdapter::load(dir, model_, storage_);
  if (!adapter.ok()) return adapter.status().with_context("adapter '" + name + "' from " + dir);
  LoadedAdapter e{name, std::make_shared<const LoraAdapter>(std::move(adapter).value()), 0, dir};
  std::lock_guard<std::mutex> lock(mu_);
  e.revision = ++revisions_[name];
  loaded_[name] = e;
  return e;
}

Status AdapterRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (loaded_.erase(name) == 0) return not_found("adapter '" + name + "' is not loaded");
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
  return it->second;
}

std::vector<LoadedAdapter> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LoadedAdapter> out;
  for (const auto& [_, e] : loaded_) out.push_back(e);
  return out;
}

}  // namespace kiln
