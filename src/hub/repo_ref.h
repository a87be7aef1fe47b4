// A model named on the Hugging Face Hub: ORG/NAME[@REVISION], checked against the Hub's rules
// for repository ids and against revisions that could step out of the cache's refs/ folder.
#pragma once

#include <string>

#include "core/status.h"

namespace kiln::hub {

struct RepoRef {
  std::string org, name;
  std::string revision = "main";  // a branch, a tag, "refs/pr/N" or a 40-hex commit
  bool revision_given = false;    // "@REVISION" was written

  std::string id() const { return org + "/" + name; }          // "Qwen/Qwen3.5-4B"
  std::string label() const;                                  // id, plus "@rev" when given
  std::string folder() const { return "models--" + org + "--" + name; }  // the cache's folder name
};

// "ORG/NAME" or "ORG/NAME@REVISION"; the error names `text` and the rule it breaks.
Result<RepoRef> parse_repo_ref(const std::string& text);

// A 40-hex commit hash (the form a snapshot folder and a ref file hold).
bool is_commit_hash(const std::string& s);

}  // namespace kiln::hub
