#include "train/adapter_publish.h"

#include "engine/adapter_registry.h"

namespace kiln {

Result<StagedFolder> stage_adapter(const std::string& adapter_dir, const std::string& name) {
  KILN_RETURN_IF_ERROR(AdapterRegistry::check_name(name));
  return StagedFolder::create(adapter_dir, name);
}

Result<std::string> publish_staged(StagedFolder& staged, const ModelConfig& model, PublishMode mode) {
  auto loaded = HostLoraAdapter::read(staged.path(), model);
  if (!loaded.ok()) return loaded.status().with_context("the adapter failed validation, nothing was published");
  return staged.publish(mode);
}

Result<std::string> publish_adapter(const HostLoraAdapter& adapter, const nlohmann::json& receipt,
                                    const ModelConfig& model, const std::string& adapter_dir, const std::string& name,
                                    OnPublishFailure on_failure) {
  KILN_ASSIGN_OR_RETURN(StagedFolder staged, stage_adapter(adapter_dir, name));
  Status written = adapter.write(staged.path());
  if (written.ok() && !receipt.is_null())
    written = write_file_atomically(staged.path() + "/" + kTrainReceiptFile, receipt.dump(2) + "\n");
  if (!written.ok())
    return written.with_context("writing adapter '" + name + "' failed" +
                                (on_failure == OnPublishFailure::kKeep ? " (nothing could be kept)" : ""));
  auto published = publish_staged(staged, model, PublishMode::kReplace);
  // Failing after its rename, the adapter is in place already (only its durability is in doubt).
  if (published.ok() || on_failure == OnPublishFailure::kDiscard || !staged.pending()) return published;
  const std::string why = "publishing adapter '" + name + "' failed: " + published.status().message();
  auto kept = staged.keep();
  if (!kept.ok()) return Status(published.status().code(), why + "; it could not be kept: " + kept.status().message());
  return Status(published.status().code(),
                why + "; the adapter is kept in " + *kept + " (rename it to " + staged.destination() + " to publish it)");
}

}  // namespace kiln
