// kiln: the one binary. This file only parses argv and dispatches to the subcommands.
#include <cstdio>

#include "cli/commands.h"
#include "core/build_stamp.h"
#include "core/status.h"

namespace kiln::cli {

int exit_code = 0;

void report(const Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "error: %s\n", status.to_string().c_str());
  exit_code = 1;
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  CLI::App app{
      "Kiln serves Qwen3.5 models (Gated DeltaNet + gated attention) over an OpenAI-compatible HTTP API,\n"
      "and has tools around it: generation, benchmarks, the backend capability report, hardware\n"
      "qualification, tokenizer and configuration tools, and clients of a running server's training and\n"
      "adapter routes. `kiln` alone runs `kiln serve`.\n"
      "Run `kiln <command> --help` for each command's options."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0 (" + kiln::build_stamp_label() + ")");
  kiln::cli::add_serve_command(app);
  kiln::cli::add_generate_command(app);
  kiln::cli::add_model_command(app);
  kiln::cli::add_bench_command(app);
  kiln::cli::add_capabilities_command(app);
  kiln::cli::add_qualify_command(app);
  kiln::cli::add_tokenizer_commands(app);
  kiln::cli::add_config_command(app);
  kiln::cli::add_train_command(app);
  kiln::cli::add_eval_command(app);
  kiln::cli::add_adapters_command(app);
  kiln::cli::add_check_command(app);
  static char serve[] = "serve";
  char* serve_argv[] = {argv[0], serve, nullptr};
  if (argc == 1) {  // the default command
    argc = 2;
    argv = serve_argv;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return kiln::cli::exit_code;
}
