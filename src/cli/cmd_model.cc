// `kiln model init`: write a random-weight checkpoint of a named shape.
#include <cstdio>

#include "cli/commands.h"
#include "core/status.h"
#include "model/init.h"

namespace kiln::cli {

void add_model_command(CLI::App& app) {
  auto* model = app.add_subcommand("model", "Model utilities (random-weight checkpoints)");
  model->require_subcommand(1);
  auto* init = model->add_subcommand(
      "init", "Write a random-weight checkpoint (config.json + model.safetensors) in the HF layout");
  struct Opts {
    std::string preset, dtype = "bf16", out;
    uint64_t seed = 0;
  };
  auto opts = std::make_shared<Opts>();
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  init->add_option("--preset", opts->preset, "Shape: " + presets)->required();
  init->add_option("--seed", opts->seed, "Random seed (same seed, same weights)")->capture_default_str();
  init->add_option("--dtype", opts->dtype, "Weight dtype: bf16, f16 or f32")->capture_default_str();
  init->add_option("--out", opts->out, "Output directory (created if missing)")->required();
  init->callback([opts] {
    auto config = preset_config(opts->preset);
    if (!config.ok()) return report(config.status());
    auto dtype = parse_dtype(opts->dtype);
    if (!dtype || !is_float(*dtype)) return report(invalid_argument("--dtype '" + opts->dtype + "': expected bf16, f16 or f32"));
    InitOptions io;
    io.seed = opts->seed;
    io.dtype = *dtype;
    report(write_random_checkpoint(config.value(), opts->out, io));
    if (exit_code == 0) std::printf("%s\n", opts->out.c_str());
  });
}

}  // namespace kiln::cli
