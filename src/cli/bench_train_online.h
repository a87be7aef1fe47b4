// `kiln bench train --method grpo|opd`: the time of an online training iteration, phase by phase,
// through the server's own path: a ServingStack on the checkpoint (as `kiln serve` builds it, on
// a loopback port), its rollout source (server/rollout_service.h) sampling every completion with
// the adapter in training as a private adapter, and run_training with the stack's device runner,
// as a training job runs. Then each part alone: the same rollout with nothing else running, and
// training steps over a rollout already drawn; the iteration's time over their sum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/training_facets.h"
#include "core/status.h"

namespace kiln::cli {

struct OnlineTrainBenchOpts {
  bool opd = false;                      // else GRPO
  std::string model, tokenizer, backend = "cpu", out, peer_json;
  OptimizerKind optimizer = OptimizerKind::kMuon;
  int64_t prompts = 8, group = 8, max_tokens = 256, prompt_tokens = 64, iterations = 3;
  int64_t rank = 16, checkpoint_every = 1;
  int64_t micro_batch = 0;               // sequences per micro-batch; 0: one group
  double trace_budget_gb = -1;
  uint64_t seed = 0;
};

// The benches' random tokens (the SFT sequences and these prompts; tools/bench_hf_rl_peer.py
// repeats the generator): `n` ids below `vocab`, advancing `state` (2024 + the seed at the start).
std::vector<int32_t> bench_random_tokens(int64_t n, int64_t vocab, uint32_t& state);

// The flags' checks; the message names the flag.
Status check_online_train_bench(const OnlineTrainBenchOpts& o);

// The benchmark's JSON document on stdout (and --out).
Status run_online_train_bench(const OnlineTrainBenchOpts& o);

}  // namespace kiln::cli
