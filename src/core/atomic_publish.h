// Crash-safe writes of state on disk: a file or a folder is written under a staging name beside
// its destination, fsynced, renamed into place and its parent folder fsynced, so that after a
// crash at any point the destination holds the old complete version or the new one. What an
// interrupted publication leaves carries a reserved name that sweep_staging clears at startup.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln {

// Names starting with these are reserved in a folder of published state (names of adapters and
// suites may not start with '.'). "<prefix><name>-<16 hex digits>".
inline constexpr std::string_view kStagingPrefix = ".staging-";    // being written: swept
inline constexpr std::string_view kReplacedPrefix = ".replaced-";  // an old version moved aside: swept
inline constexpr std::string_view kRemovedPrefix = ".removed-";    // being deleted: swept
inline constexpr std::string_view kFailedPrefix = ".failed-";      // kept after a failed publish: kept

// The steps of a publication where it can fail (or, in a test, stop), in order.
enum class PublishStep {
  kSyncFiles,       // fsync of the written files and of a staged folder
  kRename,          // the rename into place (or aside, when removing or keeping)
  kSyncParent,      // fsync of the parent folder, which makes the rename durable
  kRemoveReplaced,  // deletion of the version replaced (or removed)
};
const char* publish_step_name(PublishStep step);

// Tests only: called before each step with the path it acts on; a non-OK Status fails the step
// as the system would (e.g. ENOSPC), and a test that forks may end the process there to stand for
// a crash. An empty hook (the default) clears it. Process-wide.
using PublishFaultHook = std::function<Status(PublishStep step, const std::string& target)>;
void set_publish_fault_hook(PublishFaultHook hook);

enum class PublishMode {
  kReplace,    // an existing destination is replaced in one step
  kCreateNew,  // an existing destination is kFailedPrecondition and stays untouched
};

// Writes `path` through a staging file beside it that `write` fills (given its path), then
// fsync, rename (kCreateNew: never over an existing file) and fsync of the folder. On failure the
// staging file is gone and `path` is as it was.
Status write_file_atomically(const std::string& path, const std::function<Status(const std::string&)>& write,
                             PublishMode mode = PublishMode::kReplace);
Status write_file_atomically(const std::string& path, std::string_view contents,
                             PublishMode mode = PublishMode::kReplace);

// A folder <parent>/<name> being built: files are written into path(), then publish() puts it in
// place. Destroyed unpublished and not kept, the staging folder is removed.
class StagedFolder {
 public:
  // Creates <parent>/.staging-<name>-<random> (and `parent` where missing).
  static Result<StagedFolder> create(const std::string& parent, const std::string& name);
  StagedFolder(StagedFolder&& other) noexcept;
  StagedFolder& operator=(StagedFolder&& other) noexcept;  // removes this one's staging folder first
  ~StagedFolder();

  const std::string& path() const { return path_; }
  std::string destination() const;  // <parent>/<name>
  bool pending() const { return !done_; }  // neither published nor kept: the files are at path()

  // fsyncs the files and the folder, renames it to destination() (kReplace: an existing one is
  // exchanged in one rename, then deleted), fsyncs the parent. Returns destination(). Failing
  // before the rename, the staging folder is left complete for keep(); after it, the new version
  // is in place and the error says that only its durability is in doubt.
  Result<std::string> publish(PublishMode mode);
  // Renames the unpublished folder to <parent>/.failed-<name>-<random>, which sweeps leave alone,
  // and returns that path: where a publication that failed keeps its files for a retry.
  Result<std::string> keep();

 private:
  StagedFolder(std::string parent, std::string name, std::string suffix);
  void discard();  // removes the staging folder unless published or kept
  std::string parent_, name_, suffix_, path_;
  bool done_ = false;  // published or kept: nothing to remove
};

// Deletes <parent>/<name> so that it disappears in one step: renamed aside to a reserved name
// (which sweeps remove), then deleted. kNotFound when it is not there.
Status remove_published(const std::string& parent, const std::string& name);

struct SweepResult {
  std::vector<std::string> removed;   // staging, replaced and removed leftovers deleted
  std::vector<std::string> restored;  // versions moved aside whose destination was missing, put back
  std::vector<std::string> kept;      // .failed-* folders (for the operator)
  std::string summary() const;        // one line; "" when there was nothing to do
};

// Clears what interrupted publications left in `dir` and in the folders directly inside it (a
// published folder's rewritten files, a folder of checkpoints): staging and removed entries are
// deleted; a replaced version goes back to its name where that is missing (the crash fell
// between moving it aside and renaming the new one in), else it is deleted. A missing `dir` is
// nothing to do. Call it before anything writes to `dir`.
Result<SweepResult> sweep_staging(const std::string& dir);

}  // namespace kiln
