// The mismatch audit: for a table of small, executable requests covering every facet method,
// asks the backend's support predicate and then runs the paired method. A predicate that says
// yes while the method declines (or says no while the method runs) is a mismatch.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"

namespace kiln {

struct AuditRow {
  std::string facet;    // "linear.matmul", ...
  std::string request;  // the request's describe()
  Support support;
  Status outcome;       // what the method returned
  bool mismatch = false;
  std::string problem;  // why it is a mismatch, or why the case itself failed
};

std::vector<AuditRow> audit_support(Backend& backend);
int count_mismatches(const std::vector<AuditRow>& rows);

}  // namespace kiln
