// `kiln check`: declared correctness checks on a model and a backend. Each prints its telemetry as
// JSON, exits 1 when the check does not hold, and with KILN_QUALIFICATION_CASE_RESULT set writes
// the qualification case result.
#include "cli/commands.h"

namespace kiln::cli {

void add_check_command(CLI::App& app) {
  CLI::App* check = app.add_subcommand(
      "check", "Run a declared correctness check on a model and backend and print its telemetry (JSON); with "
               "KILN_QUALIFICATION_CASE_RESULT set, also write the qualification case result");
  check->require_subcommand(1);
  add_check_prefill_continuity_command(*check);
  add_check_state_slots_command(*check);
}

}  // namespace kiln::cli
