// Whether a run's evidence still speaks for the code a gate covers: the commit compiled into the
// test binary against the commits after it, up to the commit the report speaks for, that touched
// the gate's source paths. Git is asked through SourceHistory, so the rule is testable without it.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "report/evidence_record.h"

namespace kiln {

// The repository's history as the report needs it.
class SourceHistory {
 public:
  virtual ~SourceHistory() = default;
  // The commit the report speaks for (40 hex); "" when there is none (no git, no repository).
  virtual std::string as_of() const = 0;
  // Commits after `since` up to as_of() that touch a file matching one of `paths` (git glob
  // pathspecs: "src/backend/*" the folder's own files, "src/model/**" everything below), newest
  // first; an error when `since` is not a commit of the repository.
  virtual Result<std::vector<std::string>> commits_touching(const std::string& since,
                                                            const std::vector<std::string>& paths) const = 0;
};

enum class Freshness : uint8_t { kFresh, kStale, kUnknown };

struct FreshnessVerdict {
  Freshness state = Freshness::kUnknown;
  std::string why;  // for kStale and kUnknown, to follow the run's name: why it does not speak for as_of()
};

// Fresh only when the run was stamped with a commit, built from it unmodified, and no commit since
// touched `paths`; never fresh without history (`history` null, or no as_of()).
FreshnessVerdict evidence_freshness(const EvidenceRecord& run, const std::vector<std::string>& paths,
                                    const SourceHistory* history);

}  // namespace kiln
