// The few questions the runner asks git about the repository it qualifies, each answered by
// running git without a shell.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::qualify {

class GitRepo {
 public:
  // Finds the worktree root containing `path` (a file or directory).
  static Result<GitRepo> discover(const std::string& path);
  explicit GitRepo(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  Result<std::string> head_commit() const;
  // Modified, staged, deleted or untracked paths; paths under .qualification/ (the runner's
  // own output, git-ignored in this project) do not count.
  Result<std::vector<std::string>> dirty_paths() const;
  // The bytes of `relative_path` as committed at HEAD; not_found when it is not committed.
  Result<std::string> file_at_head(const std::string& relative_path) const;
  Result<std::vector<std::string>> tracked_files() const;
  // Whether `commit` names a commit object in this repository.
  Result<bool> has_commit(const std::string& commit) const;
  // The full hash of the commit `rev` names; not_found when it names none.
  Result<std::string> resolve_commit(const std::string& rev) const;
  // Commits after `since` up to `until` that touch a file matching one of `globs` (git glob
  // pathspecs: `*` stays within a folder, `**` crosses folders; one led by `!` excludes what it
  // matches), newest first; not_found when either is not a commit of this repository.
  Result<std::vector<std::string>> commits_touching(const std::string& since, const std::string& until,
                                                    const std::vector<std::string>& globs) const;
  // Whether commit `a` is `b` or one of its ancestors.
  Result<bool> is_ancestor(const std::string& a, const std::string& b) const;
  // Tracked paths matching `globs` (as commits_touching takes them) whose contents differ between commit `since` and `until` (a
  // commit), or the worktree when `until` is empty: committed and uncommitted changes alike.
  Result<std::vector<std::string>> changed_paths(const std::string& since, const std::string& until,
                                                 const std::vector<std::string>& globs) const;

 private:
  // Runs `git -C root args...`; the error names the command and git's stderr.
  Result<std::string> git(const std::vector<std::string>& args, bool* failed = nullptr) const;
  std::string root_;
};

// sha256 over (path, executable bit, sha256 of contents) of every tracked file as it is in the
// worktree, sorted by path. Committed receipts (qualification/receipts/) and the runner's own
// output (.qualification/) are evidence, not source, and are left out so that committing a
// receipt does not change the hash it records.
Result<std::string> source_tree_hash(const GitRepo& repo);

}  // namespace kiln::qualify
