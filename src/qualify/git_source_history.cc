#include "qualify/git_source_history.h"

#include <map>

#include "qualify/git_repo.h"

namespace kiln::qualify {
namespace {

class GitSourceHistory final : public SourceHistory {
 public:
  GitSourceHistory(GitRepo repo, std::string as_of) : repo_(std::move(repo)), as_of_(std::move(as_of)) {}
  std::string as_of() const override { return as_of_; }
  Result<std::vector<std::string>> commits_touching(const std::string& since,
                                                    const std::vector<std::string>& paths) const override {
    // Many runs share a commit and many gates a path list: each question goes to git once.
    std::string key = since;
    for (const std::string& p : paths) key += '\0' + p;
    auto it = answers_.find(key);
    if (it == answers_.end()) it = answers_.emplace(key, repo_.commits_touching(since, as_of_, paths)).first;
    return it->second;
  }

 private:
  GitRepo repo_;
  std::string as_of_;
  mutable std::map<std::string, Result<std::vector<std::string>>> answers_;
};

}  // namespace

Result<std::unique_ptr<SourceHistory>> git_source_history(const std::string& path, const std::string& as_of) {
  KILN_ASSIGN_OR_RETURN(GitRepo repo, GitRepo::discover(path));
  KILN_ASSIGN_OR_RETURN(std::string commit, repo.resolve_commit(as_of.empty() ? "HEAD" : as_of));
  return std::unique_ptr<SourceHistory>(new GitSourceHistory(std::move(repo), std::move(commit)));
}

}  // namespace kiln::qualify
