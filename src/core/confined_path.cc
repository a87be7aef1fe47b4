#include "core/confined_path.h"

#include <filesystem>

namespace kiln {

namespace {

namespace fs = std::filesystem;

enum class Kind { kFile, kDir };

Result<fs::path> resolve(const ConfinedFolder& folder, const std::string& path, std::string_view field, Kind kind) {
  const std::string what = std::string(field) + " '" + path + "'";
  const std::string where = folder.key + " (" + folder.path + ")";
  if (path.empty()) return invalid_argument(std::string(field) + " is empty");
  if (path.find('\0') != std::string::npos) return invalid_argument(what + " holds a NUL byte");
  for (const fs::path& part : fs::path(path))
    if (part == "..") return invalid_argument(what + " holds '..': name a path inside " + where);
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(folder.path, ec);
  if (ec) return not_found(what + ": " + where + " cannot be resolved: " + ec.message());
  const fs::path candidate = fs::path(path).is_absolute() ? fs::path(path) : fs::path(folder.path) / path;
  const std::string inside = base.string() + "/";
  const fs::path real = fs::canonical(candidate, ec);
  if (ec) {
    // Nothing there (or a link to nothing): outside the folder is still the first thing to say.
    std::error_code ec2;
    if (fs::weakly_canonical(candidate, ec2).string().rfind(inside, 0) != 0) return invalid_argument(what + " is outside " + where);
    return not_found(what + ": nothing there in " + where);
  }
  if (real.string().rfind(inside, 0) != 0)
    return invalid_argument(what + " is outside " + where + (real != candidate ? " (it resolves to " + real.string() + ")" : ""));
  const fs::file_status st = fs::status(real, ec);
  if (kind == Kind::kDir && !fs::is_directory(st)) return invalid_argument(what + " is not a folder");
  if (kind == Kind::kFile && !fs::is_regular_file(st))
    return invalid_argument(what + " is not a regular file" + (fs::is_directory(st) ? " (it is a folder)" : ""));
  return real;
}

}  // namespace

Result<std::string> confined_file(const ConfinedFolder& folder, const std::string& path, std::string_view field,
                                  int64_t max_bytes) {
  KILN_ASSIGN_OR_RETURN(fs::path real, resolve(folder, path, field, Kind::kFile));
  std::error_code ec;
  const uintmax_t size = fs::file_size(real, ec);
  if (ec) return invalid_argument(std::string(field) + " '" + path + "': " + ec.message());
  if (static_cast<int64_t>(size) > max_bytes)
    return invalid_argument(std::string(field) + " '" + path + "' is " + std::to_string(size) + " bytes; at most " +
                            std::to_string(max_bytes) + " are read");
  return real.string();
}

Result<std::string> confined_dir(const ConfinedFolder& folder, const std::string& path, std::string_view field) {
  KILN_ASSIGN_OR_RETURN(fs::path real, resolve(folder, path, field, Kind::kDir));
  return real.string();
}

}  // namespace kiln
