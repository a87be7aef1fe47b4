// A command run as a user runs it: through /bin/sh, its standard output captured (the command
// redirects stderr where it wants it) and its exit code. What the CLI tests drive `kiln` with.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace kiln::testing {

struct CommandResult {
  int code = -1;    // the exit code; -1 when it did not exit normally or could not start
  std::string out;  // what it wrote on stdout (and stderr, with 2>&1)
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace kiln::testing
