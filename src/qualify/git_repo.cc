#include "qualify/git_repo.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "qualify/environment_filter.h"
#include "qualify/process.h"
#include "core/sha256.h"

namespace kiln::qualify {
namespace {

Result<std::string> run_git(const std::string& cwd, const std::vector<std::string>& args, bool* failed) {
  ProcessSpec spec;
  spec.argv = {"git"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.working_directory = cwd;
  spec.environment = filtered_environment();
  set_environment(spec.environment, "GIT_OPTIONAL_LOCKS", "0");
  set_environment(spec.environment, "LC_ALL", "C");
  spec.timeout_seconds = 120;
  spec.capture_limit_bytes = 256u << 20;
  KILN_ASSIGN_OR_RETURN(ProcessOutcome o, run_process(spec));
  std::string cmd = "git";
  for (const std::string& a : args) cmd += " " + a;
  if (!o.started) return failed_precondition(cmd + ": " + o.start_error);
  if (o.stdout_truncated) return resource_exhausted(cmd + ": output too large");
  if (!o.exited || o.exit_code != 0) {
    if (failed != nullptr) {
      *failed = true;
      return std::string();
    }
    return failed_precondition(cmd + " in " + cwd + " failed: " + o.stderr_text);
  }
  return std::move(o.stdout_text);
}

std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\0', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

Result<GitRepo> GitRepo::discover(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return invalid_argument("cannot resolve " + path);
  std::filesystem::path dir = std::filesystem::is_directory(p, ec) ? p : p.parent_path();
  KILN_ASSIGN_OR_RETURN(std::string top, run_git(dir.string(), {"rev-parse", "--show-toplevel"}, nullptr));
  while (!top.empty() && top.back() == '\n') top.pop_back();
  return GitRepo(top);
}

Result<std::string> GitRepo::git(const std::vector<std::string>& args, bool* failed) const {
  return run_git(root_, args, failed);
}

Result<std::string> GitRepo::head_commit() const {
  KILN_ASSIGN_OR_RETURN(std::string head, git({"rev-parse", "--verify", "HEAD^{commit}"}));
  while (!head.empty() && head.back() == '\n') head.pop_back();
  return head;
}

Result<std::vector<std::string>> GitRepo::dirty_paths() const {
  KILN_ASSIGN_OR_RETURN(std::string status, git({"status", "--porcelain=v1", "-z", "--untracked-files=all"}));
  std::vector<std::string> out;
  std::vector<std::string> entries = split_nul(status);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    if (e.size() < 4) continue;
    std::string path = e.substr(3);
    if (e[0] == 'R' || e[0] == 'C') ++i;  // a rename carries its source as the next entry
    if (path.rfind(".qualification/", 0) == 0) continue;
    out.push_back(path);
  }
  return out;
}

Result<std::string> GitRepo::file_at_head(const std::string& relative_path) const {
  bool failed = false;
  KILN_ASSIGN_OR_RETURN(std::string bytes, git({"cat-file", "blob", "HEAD:" + relative_path}, &failed));
  if (failed) return not_found(relative_path + " is not committed at HEAD");
  return bytes;
}

Result<std::vector<std::string>> GitRepo::tracked_files() const {
  KILN_ASSIGN_OR_RETURN(std::string files, git({"ls-files", "-z"}));
  std::vector<std::string> out = split_nul(files);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<bool> GitRepo::has_commit(const std::string& commit) const {
  bool failed = false;
  KILN_ASSIGN_OR_RETURN(std::string ignored, git({"cat-file", "-e", commit + "^{commit}"}, &failed));
  (void)ignored;
  return !failed;
}

Result<std::string> GitRepo::resolve_commit(const std::string& rev) const {
  bool failed = false;
  KILN_ASSIGN_OR_RETURN(std::string hash, git({"rev-parse", "--verify", "--quiet", rev + "^{commit}"}, &failed));
  while (!hash.empty() && hash.back() == '\n') hash.pop_back();
  if (failed || hash.empty()) return not_found(rev + " is not a commit of " + root_);
  return hash;
}

namespace {

// A glob as a git pathspec; `!glob` excludes.
std::string glob_pathspec(const std::string& g) {
  return g.rfind('!', 0) == 0 ? ":(glob,exclude)" + g.substr(1) : ":(glob)" + g;
}

}  // namespace

Result<std::vector<std::string>> GitRepo::commits_touching(const std::string& since, const std::string& until,
                                                           const std::vector<std::string>& globs) const {
  KILN_ASSIGN_OR_RETURN(std::string from, resolve_commit(since));
  KILN_ASSIGN_OR_RETURN(std::string to, resolve_commit(until));
  std::vector<std::string> args = {"rev-list", from + ".." + to, "--"};
  for (const std::string& g : globs) args.push_back(glob_pathspec(g));
  KILN_ASSIGN_OR_RETURN(std::string list, git(args));
  std::vector<std::string> out;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find('\n', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<bool> GitRepo::is_ancestor(const std::string& a, const std::string& b) const {
  KILN_ASSIGN_OR_RETURN(std::string from, resolve_commit(a));
  KILN_ASSIGN_OR_RETURN(std::string to, resolve_commit(b));
  bool failed = false;
  KILN_ASSIGN_OR_RETURN(std::string ignored, git({"merge-base", "--is-ancestor", from, to}, &failed));
  (void)ignored;
  return !failed;
}

Result<std::vector<std::string>> GitRepo::changed_paths(const std::string& since, const std::string& until,
                                                        const std::vector<std::string>& globs) const {
  KILN_ASSIGN_OR_RETURN(std::string from, resolve_commit(since));
  std::vector<std::string> args = {"diff", "--name-only", "-z", "--no-renames", from};
  if (!until.empty()) {
    KILN_ASSIGN_OR_RETURN(std::string to, resolve_commit(until));
    args.push_back(to);
  }
  args.push_back("--");
  for (const std::string& g : globs) args.push_back(glob_pathspec(g));
  KILN_ASSIGN_OR_RETURN(std::string list, git(args));
  std::vector<std::string> out = split_nul(list);
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> source_tree_hash(const GitRepo& repo) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> files, repo.tracked_files());
  std::string manifest;
  for (const std::string& f : files) {
    if (f.rfind("qualification/receipts/", 0) == 0 || f.rfind(".qualification/", 0) == 0) continue;
    std::string full = repo.root() + "/" + f;
    struct stat st {};
    if (lstat(full.c_str(), &st) != 0) {
      manifest += f;
      manifest += '\0';
      manifest += "deleted\n";
      continue;
    }
    std::string digest;
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      digest = "link:" + std::filesystem::read_symlink(full, ec).string();
    } else if (S_ISREG(st.st_mode)) {
      KILN_ASSIGN_OR_RETURN(FileDigest d, sha256_file(full));
      digest = d.sha256;
    } else {
      digest = "other";  // a submodule directory
    }
    manifest += f;
    manifest += '\0';
    manifest += (st.st_mode & S_IXUSR) ? "x" : "-";
    manifest += digest + "\n";
  }
  return "sha256:" + sha256_hex(manifest);
}

}  // namespace kiln::qualify
