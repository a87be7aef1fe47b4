#include "report/freshness.h"

namespace kiln {

namespace {

std::string short_commit(const std::string& c) { return c.substr(0, 12); }

}  // namespace

FreshnessVerdict evidence_freshness(const EvidenceRecord& run, const std::vector<std::string>& paths,
                                    const SourceHistory* history) {
  if (!run.stamped)
    return {Freshness::kStale, "is unstamped (recorded before test binaries carried their commit; it says '" + run.commit + "')"};
  if (run.commit == "unknown" || run.commit.empty())
    return {Freshness::kUnknown, "was built outside a git checkout: its commit is unknown"};
  const std::string at = short_commit(run.commit);
  if (run.dirty) return {Freshness::kStale, "was built from uncommitted changes to " + at};
  if (history == nullptr || history->as_of().empty())
    return {Freshness::kUnknown, "at " + at + " cannot be compared: there is no git history here"};
  Result<std::vector<std::string>> since = history->commits_touching(run.commit, paths);
  if (!since.ok()) return {Freshness::kUnknown, "at " + at + " cannot be compared: " + since.status().message()};
  if (since->empty()) return {Freshness::kFresh, ""};
  const size_t n = since->size();
  return {Freshness::kStale, "at " + at + " predates " + std::to_string(n) + (n == 1 ? " commit" : " commits") +
                                 " that changed the code it covers (the newest " + short_commit(since->front()) + ")"};
}

}  // namespace kiln
