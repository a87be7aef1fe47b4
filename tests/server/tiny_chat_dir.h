// What the server tests that start a ServingStack on the tiny-chat model share: the model folder
// (random weights, the Qwen3 tokenizer) with its configuration, and random adapters of the model.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "backend/registry.h"
#include "config/kiln_config.h"
#include "model/init.h"
#include "model/lora_adapter.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln::testing {

// A random rank-`rank` adapter (alpha 2 x rank, every target) of the tiny-chat model in `dir`;
// B is drawn too, so it changes replies.
inline void write_random_adapter(const std::string& dir, int64_t rank, uint64_t seed) {
  auto backend = create_backend("cpu").value();
  LoraConfig c;
  c.rank = rank;
  c.alpha = 2.0 * static_cast<double>(rank);
  for (int t = 0; t < kLoraTargetCount; ++t) c.targets.push_back(static_cast<LoraTarget>(t));
  LoraAdapter a = LoraAdapter::init(c, preset_config("tiny-chat").value(), seed, backend->storage()).value();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.5f);
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      for (int64_t i = 0; i < f.b.numel(); ++i) f.b.data<float>()[i] = normal(rng);
    }
  ASSERT_TRUE(a.save(dir, backend->storage()).ok());
}

// The tiny-chat model (or `model`, a variant of its shape) written to `dir` with the Qwen3
// tokenizer, and a configuration serving it on the CPU from there (state and adapters inside
// `dir`, any free port, 512-token context).
inline KilnConfig tiny_chat_server_config(const std::string& dir,
                                          const ModelConfig& model = preset_config("tiny-chat").value()) {
  EXPECT_TRUE(write_random_checkpoint(model, dir, {.quiet = true}).ok());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(qwen3_dir() + "/" + f, dir + "/" + f);
  KilnConfig c;
  c.model.path = dir;
  c.model.backend = "cpu";
  c.model.max_context = 512;
  c.model.adapter_dir = dir + "/adapters";
  c.server.state_dir = dir;
  c.server.port = 0;
  return c;
}

}  // namespace kiln::testing
