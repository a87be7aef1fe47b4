// `kiln serve`: the OpenAI-compatible server (the default command). Resolves the configuration
// (flags > KILN_* > kiln.toml > defaults), falls back to the random-weight demo model when no
// model is configured, and serves until SIGINT or SIGTERM.
#include <pthread.h>

#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "cli/default_model.h"
#include "config/config_render.h"
#include "server/serving_stack.h"

namespace kiln::cli {

namespace {

Status serve(const ConfigFlags& flags) {
  KILN_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve(flags));
  KILN_RETURN_IF_ERROR(resolve_configured_model(resolved.config));
  if (resolved.config.model.path.empty()) {
    KILN_ASSIGN_OR_RETURN(resolved.config.model.path, demo_model_dir());
    if (resolved.config.model.served_model_id.empty()) resolved.config.model.served_model_id = "kiln-demo";
    std::fprintf(stderr,
                 "kiln: no model configured: serving the RANDOM-WEIGHT demo model in %s (its answers are noise).\n"
                 "kiln: to serve real Qwen3.5 weights: kiln serve --model Qwen/Qwen3.5-4B (a Hub name, fetched into "
                 "the Hugging Face cache) or --model DIR (a checkpoint folder)\n",
                 resolved.config.model.path.c_str());
  }
  // SIGINT/SIGTERM are taken by sigwait below, not delivered to whichever thread runs.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ServingStack> stack, ServingStack::start(resolved.config, config_to_json(resolved)));
  std::fprintf(stderr, "kiln: serving '%s' at %s (OpenAI API under /v1; /health, /metrics)\n", stack->model_id().c_str(),
               stack->base_url().c_str());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "kiln: %s: stopping (requests in flight are cancelled)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  stack->stop();
  return {};
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the model over the OpenAI-compatible HTTP API (the default command)");
  auto flags = std::make_shared<ConfigFlags>();
  add_config_flags(*cmd, *flags);
  cmd->footer(
      "--model (model.path in kiln.toml, KILN_MODEL_PATH) is a checkpoint folder or a Hugging Face Hub name\n"
      "ORG/NAME[@REVISION]: a name is read from the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else\n"
      "~/.cache/huggingface/hub) and fetched from $HF_ENDPOINT (default https://huggingface.co) when missing,\n"
      "unless HF_HUB_OFFLINE=1; HF_TOKEN for gated models. An existing folder wins over a name that reads the same.\n"
      "Without a model it serves a random-weight demo model with the real Qwen3 tokenizer, created once under\n"
      "$KILN_HOME (~/.cache/kiln). `kiln config` shows the effective configuration; `kiln config --markdown` lists\n"
      "every key.");
  cmd->callback([flags] { report(serve(*flags)); });
}

}  // namespace kiln::cli
