#include "cli/bench_roofline.h"

#include "model/state.h"

namespace kiln::cli {

double decode_step_bytes(const ModelConfig& c, const ModelWeights& w, DType kv_dtype, int64_t rows, int64_t context) {
  const double kv_per_token = static_cast<double>(ModelState::block_bytes_for(c, kv_dtype)) / ModelState::kBlockSize;
  const double per_row = kv_per_token * static_cast<double>(context) + 2.0 * static_cast<double>(ModelState::slot_bytes_for(c));
  return static_cast<double>(w.matmul_bytes) + static_cast<double>(rows) * per_row;
}

double prefill_flops(const ModelConfig& c, const ModelWeights& w, int64_t tokens) {
  const double elem = static_cast<double>(dtype_size(w.embed.dtype()));
  const double head = static_cast<double>(w.lm_head.numel());
  const double body = static_cast<double>(w.matmul_bytes) / elem - head;
  const double T = static_cast<double>(tokens);
  const double attention = 2.0 * T * T * static_cast<double>(c.head_dim * c.num_heads) *
                           static_cast<double>(c.count(LayerKind::kFullAttention));
  return 2.0 * body * T + 2.0 * head + attention;
}

}  // namespace kiln::cli
