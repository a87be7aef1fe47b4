#include "train/adapter_publish.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/adapter_registry.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// Removes a directory when it goes out of scope (unless released).
struct RemoveOnExit {
  std::string dir;
  ~RemoveOnExit() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

// Puts `staged` at `dest`. With an adapter already at `dest`, the two are exchanged in one
// rename (renameat2 RENAME_EXCHANGE) so readers see the old or the new directory, never none;
// where the filesystem cannot exchange, the old one is renamed aside first. The replaced
// directory ends at `staged`'s path, for the caller to remove.
Status move_into_place(const std::string& staged, const std::string& dest) {
  std::error_code ec;
  if (!fs::exists(dest, ec)) {
    if (::rename(staged.c_str(), dest.c_str()) != 0)
      return io_error("cannot rename " + staged + " to " + dest + ": " + std::strerror(errno));
    return {};
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, dest.c_str(), RENAME_EXCHANGE) == 0) return {};
  const std::string aside = staged + ".replaced";
  if (::rename(dest.c_str(), aside.c_str()) != 0)
    return io_error("cannot move the old adapter " + dest + " aside: " + std::strerror(errno));
  if (::rename(staged.c_str(), dest.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    (void)::rename(aside.c_str(), dest.c_str());
    return io_error("cannot rename " + staged + " to " + dest + ": " + why);
  }
  (void)::rename(aside.c_str(), staged.c_str());
  return {};
}

}  // namespace

Result<std::string> make_staging_dir(const std::string& adapter_dir, const std::string& name) {
  KILN_RETURN_IF_ERROR(AdapterRegistry::check_name(name));
  std::error_code ec;
  fs::create_directories(adapter_dir, ec);
  if (ec) return io_error("model.adapter_dir " + adapter_dir + ": cannot create it: " + ec.message());
  const std::string dir = (fs::path(adapter_dir) / (".staging-" + name + "-" + random_suffix())).string();
  if (!fs::create_directory(dir, ec) || ec)
    return io_error("cannot create the staging directory " + dir + ": " + (ec ? ec.message() : "it exists"));
  return dir;
}

Result<std::string> publish_staged(const std::string& staged, const ModelConfig& model, const std::string& adapter_dir,
                                   const std::string& name) {
  RemoveOnExit cleanup{staged};
  KILN_RETURN_IF_ERROR(AdapterRegistry::check_name(name));
  auto loaded = HostLoraAdapter::read(staged, model);
  if (!loaded.ok()) return loaded.status().with_context("adapter '" + name + "' failed validation, nothing was published");
  const std::string dest = (fs::path(adapter_dir) / name).string();
  KILN_RETURN_IF_ERROR(move_into_place(staged, dest));
  return dest;
}

Result<std::string> publish_adapter(const HostLoraAdapter& adapter, const nlohmann::json& receipt,
                                    const ModelConfig& model, const std::string& adapter_dir, const std::string& name) {
  KILN_ASSIGN_OR_RETURN(std::string staged, make_staging_dir(adapter_dir, name));
  RemoveOnExit cleanup{staged};
  KILN_RETURN_IF_ERROR(adapter.write(staged));
  if (!receipt.is_null()) {
    const std::string path = staged + "/" + kTrainReceiptFile;
    std::ofstream out(path);
    out << receipt.dump(2) << "\n";
    out.close();
    if (!out) return io_error("cannot write " + path);
  }
  cleanup.dir.clear();  // publish_staged owns it from here
  return publish_staged(staged, model, adapter_dir, name);
}

}  // namespace kiln
