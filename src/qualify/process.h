// Runs one program without a shell: its own process group, an explicit environment, bounded
// capture of stdout/stderr, a deadline enforced by interrupt -> grace -> terminate -> kill,
// detection (then removal) of descendants it leaves behind, and, given a sandbox plan, no network
// and bounded processes and memory (sandbox.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "qualify/sandbox.h"

namespace kiln::qualify {

struct ProcessSpec {
  std::vector<std::string> argv;          // argv[0] containing '/' is a path; otherwise found on env PATH
  std::string working_directory;          // absolute
  std::vector<std::string> environment;   // "NAME=value"; nothing else is inherited
  double timeout_seconds = 60;
  double interrupt_grace_seconds = 5;     // after SIGINT, before SIGTERM
  double terminate_grace_seconds = 5;     // after SIGTERM, before SIGKILL
  uint64_t capture_limit_bytes = 8u << 20;  // per stream; more is counted, not kept
  const SandboxPlan* sandbox = nullptr;     // null: no confinement
};

struct LeftoverProcess {
  int pid = 0;
  std::string command;  // /proc/<pid>/cmdline, spaces between arguments
};

struct ProcessOutcome {
  bool started = false;
  std::string start_error;   // why exec failed (program not found, the sandbox refused, ...)
  bool exited = false;       // ended by exit(); otherwise by a signal
  int exit_code = -1;
  int term_signal = 0;
  bool timed_out = false;
  std::vector<std::string> signals_sent;  // e.g. {"SIGINT", "SIGTERM"} in order
  std::string stdout_text;
  std::string stderr_text;
  std::string combined_text;              // both streams in arrival order
  uint64_t stdout_bytes = 0;              // total produced, including what was dropped
  uint64_t stderr_bytes = 0;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  double duration_seconds = 0;            // monotonic, from fork to the leader's exit
  std::vector<LeftoverProcess> leftovers; // descendants alive after the leader exited (then killed)
};

// Runs the program to completion. Errors are only for the runner's own failures (pipes, fork);
// a program that cannot start yields started == false.
Result<ProcessOutcome> run_process(const ProcessSpec& spec);

// Looks `program` up on `path_value` (":"-separated); `program` containing '/' is returned as is.
std::string resolve_program(const std::string& program, const std::string& path_value);

}  // namespace kiln::qualify
