// What a backend can do, built once at startup from the device's real properties and immutable
// afterwards. The capability report and the policies read it; nothing branches on device names.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/fallback.h"
#include "core/dtype.h"

namespace kiln {

struct BackendCapabilities {
  struct Storage {
    std::vector<DType> weight_dtypes;      // dtypes a checkpoint's weights may stay in
    DType activation_dtype = DType::kF32;  // what the forward computes in
    bool zero_copy_host_weights = false;   // mmapped weights are used in place
    uint64_t device_memory_bytes = 0;      // 0 when unknown
  } storage;
  struct Compute {
    std::string capability;  // the device's compute capability ("9.0"); "" when it has none (the CPU)
    int multiprocessors = 0;  // its streaming multiprocessors; 0 when it has none
    std::string target;       // what the kernels are chosen for ("sm_90a", "sm_86 (emulated on sm_90)"); "" on the CPU
    int64_t shared_memory_per_block = 0;  // bytes a block may opt into (the target's); 0 on the CPU
  } compute;
  // Which kernel family serves each operation on this device, in words (op -> family), for the
  // model's shapes; empty where the backend has one implementation per op (the CPU).
  std::vector<std::pair<std::string, std::string>> kernels;
  struct Startup {
    bool precompiles_kernels = false;
    bool prewarms = false;
  } startup;
  struct Matmul {
    std::string engine;                 // "openblas sgemm + bf16 gemv", "cublaslt", ...
    std::vector<DType> weight_dtypes;
    bool algorithm_cache = false;
  } matmul;
  struct Attention {
    bool prefill = false, paged_decode = false;
    int block_size = 64;
    int64_t max_head_dim = 0;
    std::vector<DType> kv_dtypes;
  } attention;
  struct StreamingPrefill {
    bool tiled = false;                 // long prompts processed in tiles
    int64_t auto_threshold_tokens = 0;  // prompts at least this long are tiled
    int64_t tile_tokens = 0;
  } streaming_prefill;
  struct Gdn {
    bool chunked_prefill = false, recurrent_decode = false, fused_decode = false;
    DType state_dtype = DType::kF32;
  } gdn;
  struct Decode {
    bool batched = false;
    int64_t max_batch = 0;
  } decode;
  struct DecodeExecution {
    std::string mode;  // "eager" or "graph_replay"
  } decode_execution;
  struct Training {
    bool supported = false;
    std::vector<DType> lora_dtypes;
    std::vector<std::string> optimizers;
    int muon_rank_min = 0, muon_rank_max = 0;  // 0 max: unbounded
  } training;
  struct Replay {
    bool graphs = false;
    std::string captured;  // what replay covers, in words
  } replay;
  FallbackPolicy fallback;
};

}  // namespace kiln
