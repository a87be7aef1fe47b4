// Each subcommand lives in its own cmd_*.cc and registers itself on the root CLI11 app here.
// A command's callback sets the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace kiln::cli {

extern int exit_code;

void add_serve_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_model_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_bench_serve_command(CLI::App& bench);  // `kiln bench serve`, attached by add_bench_command
void add_bench_train_command(CLI::App& bench);  // `kiln bench train`, attached by add_bench_command
void add_bench_correction_command(CLI::App& bench);  // `kiln bench correction`, likewise
void add_bench_soak_command(CLI::App& bench);  // `kiln bench soak`, likewise
void add_bench_eval_command(CLI::App& bench);  // `kiln bench eval`, likewise
void add_capabilities_command(CLI::App& app);
void add_qualify_command(CLI::App& app);
void add_tokenizer_commands(CLI::App& app);
void add_config_command(CLI::App& app);
void add_train_command(CLI::App& app);     // `kiln train sft|grpo`: a client of a running server
void add_eval_command(CLI::App& app);      // `kiln eval list|run|compare`: a client of a running server
void add_adapters_command(CLI::App& app);  // `kiln adapters list|load|unload|delete`: likewise
void add_check_command(CLI::App& app);     // `kiln check ...`: declared correctness checks (JSON)
void add_check_prefill_continuity_command(CLI::App& check);  // `kiln check prefill-continuity`
void add_check_state_slots_command(CLI::App& check);  // `kiln check state-slots`

// Prints "error: <status>" to stderr and sets exit_code to 1 when the status is an error.
void report(const Status& status);

}  // namespace kiln::cli
