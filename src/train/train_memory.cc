#include "train/train_memory.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>

#include "model/state.h"
#include "train/train_plan.h"
#include "train/train_run.h"

namespace kiln {

namespace {

constexpr int64_t kF32 = 4;
constexpr int64_t kChunk = 64;  // tokens of a GDN chunk and of a K/V block
// The largest vocabulary chunk of token_logprobs (CUDA's scratch; the CPU's per-worker tiles are smaller).
constexpr int64_t kLogitsScratch = int64_t{256} << 20;
// The attention backward's score buffers when it materialises them (CUDA: P and dS, 2^26 floats each).
constexpr int64_t kScoreScratch = 2 * (int64_t{1} << 26) * kF32;

bool adapted(const ModelConfig& c, const LoraConfig& lora, int64_t layer, LoraTarget t) {
  return lora_target_in_layer(t, c.layer_types[static_cast<size_t>(layer)]) &&
         (lora.targets.empty() || lora.has_target(t)) && lora.has_layer(layer);
}

// What the two-pass chunked delta rule keeps for its backward (GdnArgs::kept; the CUDA layout of
// kernels/gdn_chunk_record.h): per (sequence, chunk of the longest, value head) its record (q, k,
// Wk [64][dk], U [64][dv], Mq [64][64], G [64]), the state entering the chunk [dk][dv] and W [64][dv].
int64_t gdn_kept_bytes(const ModelConfig& c, int64_t sequences, int64_t longest) {
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t items = sequences * ((longest + kChunk - 1) / kChunk) * c.linear_num_value_heads;
  const int64_t record = 3 * kChunk * dk + kChunk * dv + kChunk * kChunk + kChunk;
  return items * (record + dk * dv + kChunk * dv) * kF32;
}

}  // namespace

std::string TrainMemoryEstimate::describe() const {
  auto gib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); };
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%.2f GiB (adapter %.2f, K/V and GDN state %.2f, residuals %.2f, one layer %.2f, logits %.2f, "
                "traces %.2f)",
                gib(total()), gib(adapter), gib(state), gib(residuals), gib(layer), gib(logits), gib(traces));
  return buf;
}

TrainMemoryEstimate estimate_train_memory(const ModelConfig& c, const TrainJobShape& shape) {
  TrainMemoryEstimate e;
  const int64_t S = static_cast<int64_t>(shape.sequence_tokens.size());
  int64_t T = 0, longest = 0, blocks = 0;
  for (int64_t n : shape.sequence_tokens) {
    T += n;
    longest = std::max(longest, n);
    blocks += (n + kChunk - 1) / kChunk;
  }
  const int64_t r = shape.lora.rank, H = c.hidden_size, I = c.intermediate_size;

  // Factors A [r, in] and B [out, r], their gradients, the optimizer's state.
  const int64_t copies = 2 + (shape.optimizer == OptimizerKind::kAdamW ? 2 : shape.optimizer == OptimizerKind::kMuon ? 1 : 0);
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int t = 0; t < kLoraTargetCount; ++t)
      if (adapted(c, shape.lora, l, static_cast<LoraTarget>(t))) {
        const LoraDims d = lora_target_dims(c, static_cast<LoraTarget>(t));
        e.adapter += copies * r * (d.in + d.out) * kF32;
      }

  e.state = blocks * ModelState::block_bytes_for(c, shape.kv_dtype) + S * ModelState::slot_bytes_for(c);
  // A checkpoint entering each layer, the last layer's output, the final-normed hidden states; ids,
  // targets, log-probabilities, log-sum-exps and coefficients.
  e.residuals = (c.num_layers + 2) * T * H * kF32 + 5 * T * kF32;

  // One layer in the backward: its trace (LayerTrace, f32), its output run again, dx and dh, and
  // the scratch of its backward, all alive at once at the mixer's backward.
  for (int64_t l = 0; l < c.num_layers; ++l) {
    int64_t lora = 0;  // x A^T kept by the forward, and dY B, per adapted projection
    for (int t = 0; t < kLoraTargetCount; ++t)
      if (adapted(c, shape.lora, l, static_cast<LoraTarget>(t))) lora += 2 * r;
    // h_in, x_mid, h_post, the output, dx, dh; gate_raw, up, act and dact, dgate, dup; a 16-bit
    // rounding (or a stacked copy) of the widest GEMM operand.
    int64_t per_token = 6 * H + 6 * I + std::max({H, I, c.gdn_conv_dim(), c.q_proj_rows()}) + lora;
    int64_t fixed = 0;
    if (c.layer_types[static_cast<size_t>(l)] == LayerKind::kLinearAttention) {
      const int64_t C = c.gdn_conv_dim(), V = c.gdn_value_dim(), Hv = c.linear_num_value_heads;
      // mixed, conv, z, a, b, core, normed; dnormed, dcore, dz, dconv, dab, dmixed; the q and k
      // gradients per value head before their sum over each key head's group.
      per_token += 2 * C + 3 * V + 2 * Hv + 3 * V + 2 * C + 2 * Hv + 2 * Hv * c.linear_key_head_dim;
      fixed = gdn_kept_bytes(c, S, longest);
    } else {
      const int64_t q = c.q_proj_rows(), kv = c.num_kv_heads * c.head_dim, o = c.num_heads * c.head_dim;
      // qg_raw, k_raw, qg, k, v, attn, the kept log-sum-exps; dattn, dqg, dk, dv.
      per_token += 2 * q + 3 * kv + o + c.num_heads + o + q + 2 * kv;
      fixed = std::min(kScoreScratch, 2 * S * c.num_heads * longest * longest * kF32);
    }
    e.layer = std::max(e.layer, per_token * T * kF32 + fixed);
  }
  e.logits = std::min(kLogitsScratch, T * c.vocab_size * kF32);
  e.traces = shape.trace_budget_bytes;
  return e;
}

namespace {

// Packing puts many short examples in one micro-batch, each a row with its own state: the bound
// follows the plan's micro-batches rather than batch_sequences sequences.
std::optional<std::vector<int64_t>> largest_packed_step(const TrainSpec& spec) {
  std::vector<PlanItem> items;
  int64_t longest = 0;
  for (const TrainSequence& s : spec.sft) {
    items.push_back({1, static_cast<int64_t>(s.tokens.size())});
    longest = std::max(longest, items.back().tokens);
  }
  Result<TrainPlan> plan = plan_training(items, spec);
  if (!plan.ok()) return std::nullopt;
  int64_t rows = 1, tokens = longest;
  auto visit = [&](const TrainPlan::MicroBatch& mb) {
    int64_t r = 0, t = 0;
    for (const TrainPlan::Unit& u : mb)
      for (size_t i : u) ++r, t += items[i].tokens;
    rows = std::max(rows, r);
    tokens = std::max(tokens, t);
  };
  for (const auto& step : plan->steps)
    for (const auto& mb : step) visit(mb);
  for (const auto& mb : plan->eval) visit(mb);
  std::vector<int64_t> out{longest};
  if (rows > 1) {
    const int64_t each = std::max<int64_t>(2, (tokens - longest + rows - 2) / (rows - 1));
    out.resize(static_cast<size_t>(rows), each);
  }
  return out;
}

}  // namespace

std::vector<int64_t> largest_step_tokens(const TrainSpec& spec) {
  if (spec.kind == TrainSpec::Kind::kSft && spec.pack_tokens > 0)
    if (auto packed = largest_packed_step(spec)) return *packed;
  std::vector<int64_t> lengths;
  int64_t count = spec.batch_sequences;
  if (spec.kind == TrainSpec::Kind::kSft) {
    for (const TrainSequence& s : spec.sft) lengths.push_back(static_cast<int64_t>(s.tokens.size()));
  } else {
    for (const GrpoGroup& g : spec.grpo) {
      count = std::max(count, static_cast<int64_t>(g.completions.size()));
      for (const GrpoCompletion& c : g.completions) lengths.push_back(static_cast<int64_t>(c.sequence.tokens.size()));
    }
  }
  std::sort(lengths.begin(), lengths.end(), std::greater<>());
  if (static_cast<int64_t>(lengths.size()) > count) lengths.resize(static_cast<size_t>(count));
  return lengths;
}

}  // namespace kiln
