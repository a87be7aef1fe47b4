// The confinement of a case's processes: no network (a network namespace of their own, whose only
// interface is its loopback), a bounded number of processes and bounded memory (a cgroup v2 of the
// case's own where the runner can make one, rlimits otherwise). What the platform allows is
// decided once per run (plan_sandbox) and recorded in the receipt; what it does not allow is
// recorded as unenforced with the reason, never assumed.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"

namespace kiln::qualify {

struct SandboxPolicy {
  bool isolate_network = true;
  uint64_t max_processes = 4096;      // 0: unbounded
  uint64_t max_memory_bytes = 0;      // 0: unbounded
};

// How one confinement holds: "network_namespace" (unshare), "user_namespace" (a user namespace
// first, for a runner without CAP_SYS_ADMIN), "cgroup_v2", "rlimit", "not_requested", or
// "unenforced" (with why).
struct Enforcement {
  std::string how = "not_requested";
  std::string why;  // set when unenforced
  bool enforced() const { return how != "unenforced" && how != "not_requested"; }
};

struct SandboxPlan {
  SandboxPolicy policy;
  Enforcement network, processes, memory;
  std::string cgroup_parent;  // cgroup_v2: the cgroup under which each case gets one of its own
};

// Probes this platform (a child tries the namespaces; the runner's cgroup v2, where it has one,
// is asked to delegate pids and memory) and decides how each part of `policy` will hold.
SandboxPlan plan_sandbox(const SandboxPolicy& policy);

// A case's own cgroup under the plan's parent, limits written; removed (its processes killed) by
// the destructor. Inert when the plan does not use cgroup v2.
class CaseCgroup {
 public:
  static Result<CaseCgroup> create(const SandboxPlan& plan);
  CaseCgroup() = default;
  CaseCgroup(CaseCgroup&& o) noexcept { *this = std::move(o); }
  CaseCgroup& operator=(CaseCgroup&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(procs_, o.procs_);
    return *this;
  }
  ~CaseCgroup();
  const std::string& procs_path() const { return procs_; }  // "" when inert
 private:
  std::string path_, procs_;
};

// What the child needs that must be prepared before the fork.
struct SandboxChildArgs {
  std::string cgroup_procs;      // the case cgroup's cgroup.procs; "" when none
  std::string uid_map, gid_map;  // "<id> <id> 1\n": the runner's ids, for a user namespace
};
SandboxChildArgs sandbox_child_args(const CaseCgroup& cgroup);

// In the child between fork and exec (async-signal-safe calls only): joins the case cgroup, cuts
// the network as planned and sets the rlimits. Returns 0, or the errno of the step that failed
// with `*step` naming it.
int apply_sandbox_in_child(const SandboxPlan& plan, const SandboxChildArgs& args, const char** step);

}  // namespace kiln::qualify
