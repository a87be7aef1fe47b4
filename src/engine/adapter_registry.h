// AdapterRegistry: the LoRA adapters a server has loaded, by name. Each load reads and validates
// the adapter's files on the caller's thread (HostLoraAdapter::read against the served model),
// uploads it through the registry's DeviceRunner (a server's: on the engine's thread, between two
// cycles), and only then replaces the entry of that name, giving it the next revision of that
// name (revisions keep counting across unloads, so a prefix-cache key naming (name, revision)
// never matches weights it was not computed with).
// Requests resolve names to shared pointers when they are submitted: an unload or a reload
// changes what later requests get, never the weights of one in flight. One loaded adapter may be
// the default: requests that name no adapter (and do not ask for the base model) resolve it at
// submit, so making a new revision the default is a swap at a drained boundary. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/facets.h"
#include "engine/device_runner.h"
#include "model/config.h"
#include "model/lora_adapter.h"

namespace kiln {

struct LoadedAdapter {
  std::string name;
  std::shared_ptr<const LoraAdapter> adapter;
  uint64_t revision = 0;  // 1 for a name's first load, then +1 for every load of it
  std::string path;       // the directory it was loaded from
};

class AdapterRegistry {
 public:
  // `model` and `storage` must outlive the registry and every adapter it hands out. Uploads run
  // through `run_on_device` (empty: on the caller's thread).
  AdapterRegistry(const ModelConfig& model, StorageFacet& storage, DeviceRunner run_on_device = {})
      : model_(model), storage_(storage), run_on_device_(std::move(run_on_device)) {}

  // The names clients may give: check_folder_name's rule (core/names.h), and none that Kiln keeps
  // for its own folders (is_reserved_adapter_name). load() takes Kiln's own names too.
  static Status check_name(const std::string& name);

  // At most `count` adapters of at most `bytes` together stay loaded (0: no limit). A load that
  // would pass either unloads the least recently resolved adapters other than the default and the
  // one being replaced; when that is not enough it fails with kResourceExhausted saying why.
  void set_limits(int64_t count, int64_t bytes);

  // Loads `dir` as `name`, replacing a loaded adapter of that name once the new one is valid
  // (a failed load leaves the old one in place). `evicted`, when given, receives the names the
  // limits unloaded.
  Result<LoadedAdapter> load(const std::string& name, const std::string& dir, std::vector<std::string>* evicted = nullptr);
  // kNotFound naming `name` when it is not loaded. Unloading the default adapter clears the default.
  Status unload(const std::string& name);
  Result<LoadedAdapter> resolve(const std::string& name) const;
  std::vector<LoadedAdapter> list() const;  // by name

  // The default adapter: `name` must be loaded (kNotFound); "" clears it. A reload of the default's
  // name keeps it the default, at the new revision.
  Status set_default(const std::string& name);
  std::string default_name() const;  // "" when none
  // The default adapter's entry, or nullopt when there is none.
  std::optional<LoadedAdapter> resolve_default() const;

 private:
  const ModelConfig& model_;
  StorageFacet& storage_;
  const DeviceRunner run_on_device_;
  mutable std::mutex mu_;
  std::map<std::string, LoadedAdapter> loaded_;
  mutable std::map<std::string, uint64_t> used_;  // name -> when last resolved or loaded (a counter)
  mutable uint64_t clock_ = 0;
  int64_t max_count_ = 0, max_bytes_ = 0;
  std::map<std::string, uint64_t> revisions_;  // last revision given to each name ever loaded
  std::string default_;                        // "" : none; always a key of loaded_ otherwise
};

}  // namespace kiln
