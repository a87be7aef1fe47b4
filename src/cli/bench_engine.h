// The engine-level half of `kiln bench`: decode throughput of N sequences decoded together (each
// first prefilled to the context), and the time to first token of one prompt, both measured
// through the Engine as serving runs it (scheduler, forward, sampling, token channels).
#pragma once

#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "grammar/mask_cache.h"
#include "model/qwen35.h"

namespace kiln::cli {

struct EngineBenchOpts {
  int64_t context = 1024;       // prompt tokens of every sequence before the timed decode steps
  int64_t decode_steps = 32;    // timed steps, each one token for every sequence
  int64_t warmup_steps = 2;     // decode steps run before the timed ones (algorithm caches, pool)
  int64_t prefill_chunk = 8192; // tokens per engine cycle while the prompts prefill
  bool device_sampling = true;  // EngineConfig::device_sampling
  bool decode_replay = true;    // EngineConfig::decode_replay
  float temperature = 0.f;      // decode sweep: 0 greedy; above, sampled (with top_p, a seed per row)
  float top_p = 1.f;
  int64_t adapters = 0;         // decode sweep: row i uses random adapter i mod `adapters` (0: none)
  int64_t adapter_rank = 16;    // ... of this rank, on every target projection
  // Decode sweep: every row constrained by this grammar (a JSON schema's), documents back to back:
  // a complete document is followed by the next one instead of the end-of-text token.
  std::shared_ptr<const grammar::MaskCache> grammar;
};

// `batch` sequences of `context` distinct tokens each, prefilled, then decoded together; the
// first decode_steps cycles after the warm-up that decode all of them (and prefill nothing) are
// timed. Greedy (or sampled at o.temperature), no logprobs.
// JSON: batch, context, prefill_cycles (cycles the prompts took; rows that prefilled early have
// decoded up to that many tokens more when the timing starts), steps, seconds, step_ms_median,
// tokens_per_s, replayed_steps (decode steps replayed as a recording, warm-up included; 0 where
// the backend runs eagerly); with o.adapters:
// adapters, adapter_rank and adapter_bytes_per_step (the factors of the distinct adapters a step
// reads, for the roofline); with o.grammar: mask_us_per_token (the host's time filling one row's
// mask, mean over the whole run) and mask_ms_per_step (the timed steps' mask time per step, summed
// over rows).
Result<nlohmann::json> bench_engine_decode(Qwen35Model& model, int64_t batch, const EngineBenchOpts& o);

// Submit-to-first-token time of a `tokens`-token prompt on an idle engine (greedy, one token),
// `repeats` times after one warm-up, each prompt distinct. JSON: tokens, ms_median, ms_each.
Result<nlohmann::json> bench_engine_ttft(Qwen35Model& model, int64_t tokens, int repeats, const EngineBenchOpts& o);

}  // namespace kiln::cli
