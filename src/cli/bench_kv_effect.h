// What a narrower K/V cache does to the logits: `kiln bench --kv-fp8` runs one prompt and greedy
// decode steps with the model's K/V dtype (e4m3) and again with the dtype the model keeps by
// default (bf16 for a bf16 checkpoint), the second run fed the first run's tokens, and compares
// every step's logits.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/qwen35.h"

namespace kiln::cli {

// JSON: kv_dtype, reference_kv_dtype, prompt_tokens, steps, max_rel_error (max |a - b| / max |b|
// over a step's logits, worst step), mean_abs_error (over every logit of every step),
// argmax_agreement (fraction of steps whose argmax is the same). `model` keeps its K/V dtype.
Result<nlohmann::json> bench_kv_effect(Qwen35Model& model, DType reference, int64_t prompt_tokens, int64_t steps);

}  // namespace kiln::cli
