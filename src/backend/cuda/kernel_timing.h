// Choosing among kernels that compute the same thing by timing them on the device that runs them
// (kernel_choice.h keeps what was found). Each op that has such candidates (decode-sized GEMMs,
// the fused GDN decode step's forms, flash against f32 prefill attention) names its shape in a key
// and hands its candidates here on first use of the key.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/kernel_choice.h"
#include "core/status.h"

namespace kiln::cuda {

struct Candidate {
  std::string name;
  std::function<Status()> run;  // enqueues the candidate on the context's stream
};

// Bytes that, written before a timed run, leave none of its operands in L2 (twice the L2).
int64_t l2_flush_bytes();

// This process's choices, kept for the device, driver and target they were timed on, in
// default_choices_file().
KernelChoices& kernel_choices();

// The name of the candidate that serves `key`: the recorded choice; else each candidate timed
// (one warm-up run, then the best of five with L2 flushed before each: a decode step streams its
// operands from memory) and the fastest kept (`preferred` wins ties within 3%); else, where no
// timing may run (inside a recording, whose eager first step has timed the shape already, or with
// KILN_CUDA_GEMM_AUTOTUNE=0), `rule`, recorded too, so that the eager calls after a recording
// compute what its replays compute. Timing synchronizes; the candidates must leave the op's
// inputs as they found them (run them on scratch outputs and state). `prepare`, when given, runs
// once before a timing (the scratch the candidates use); where it fails, the rule serves this call
// and the next call of the key times again.
Result<std::string> choose_kernel(Context& ctx, const std::string& key, const std::vector<Candidate>& candidates,
                                  std::string_view rule, std::string_view preferred,
                                  const std::function<Status()>& prepare = {});

}  // namespace kiln::cuda
