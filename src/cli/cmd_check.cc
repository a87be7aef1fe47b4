// `kiln check`: declared correctness checks on a model and backend, each a subcommand in a file
// of its own.
#include "cli/commands.h"

namespace kiln::cli {

void add_check_command(CLI::App& app) {
  auto* check = app.add_subcommand("check", "Run a declared correctness check on a model and backend, print its "
                                            "telemetry as JSON, and with KILN_QUALIFICATION_CASE_RESULT set write "
                                            "the case result");
  check->require_subcommand(1);
  add_check_state_slots_command(*check);
}

}  // namespace kiln::cli
