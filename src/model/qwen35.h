// The Qwen3.5 forward, written once against the backend facets: a batch of rows, each a prefill
// chunk or a decode token continuing from its sequence's state.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"
#include "model/config.h"
#include "model/lora_adapter.h"
#include "model/state.h"
#include "model/weights.h"

namespace kiln {

struct SequenceInput {
  SequenceState* seq;
  std::span<const int32_t> tokens;  // at least one
  std::span<const LoraTerm> lora = {};  // adapters applied to this row, deltas summed; empty: the base model
  // Optional, both or neither, one entry per token: the forward writes to scores[i] (host memory)
  // the log-probability of token score_targets[i] under position i's logits, without making the
  // [tokens, vocab] logits (TrainingFacet::token_logprobs); a target < 0 gets 0. Ask
  // Qwen35Model::token_scoring first: a backend that declines fails the forward.
  std::span<const int32_t> score_targets = {};
  std::span<float> scores = {};
};

enum class LogitsMode : uint8_t { kAll, kLast };

// What Qwen35Model::forward_layer keeps of one decoder layer for its backward (the trainer,
// train/lora_trainer.cc): views of that call's activations, [tokens, ...] each, plus copies of
// the values the forward overwrites in place. Only the tensors of the layer's mixer kind are set.
struct LayerTrace {
  Tensor h_in;            // input-normed x: the mixer's input
  Tensor x_mid;           // the residual after the mixer (copy)
  Tensor h_post;          // post-normed x_mid: the MLP's input
  Tensor qg_raw, k_raw;   // attention: q_proj (query + gate per head) and k_proj outputs before the q/k norms (copies)
  Tensor qg, k, v, attn;  // attention: q and k after norm and RoPE, v; attn = o_proj's input (gated)
  Tensor attn_kept;       // attention: what the backend kept of its softmax for its backward (AttentionArgs::kept), if anything
  Tensor mixed, conv, z, a, b, core, normed;  // GDN: projections, conv + silu output, delta rule, gated norm
  Tensor gdn_kept;        // GDN: what the backend kept of the delta rule for its backward (GdnArgs::kept), if anything
  Tensor gate_raw, up, act;  // MLP: gate_proj output (before silu-mul), up_proj output, silu(gate) * up
  // x A^T of each adapted projection, by LoraTarget, where the forward kept it (one adapter over
  // every token: LoraBatch::apply), so that the backward need not compute it again.
  std::array<Tensor, kLoraTargetCount> lora_u;
};

struct ForwardOptions {
  int gdn_chunk = 64;                           // chunk of the GDN prefill; results do not depend on it
  GdnForm prefill_form = GdnForm::kChunked;     // decode steps always use the recurrent form
  // Tiled prefill (model/tiled_prefill.h): -1 follows the backend's policy
  // (capabilities().streaming_prefill), 0 never tiles, N > 0 (a multiple of 64) runs any batch
  // with a row longer than N as passes of N tokens a row. Results do not depend on it.
  int64_t prefill_tile = -1;
};

class Qwen35Model {
 public:
  static Result<std::unique_ptr<Qwen35Model>> load(const std::string& dir, Backend& backend);
  Qwen35Model(ModelConfig config, ModelWeights weights, Backend& backend);

  const ModelConfig& config() const { return config_; }
  // Tensors of the checkpoint `load` left unread: a multimodal checkpoint's vision tower and the
  // MTP head (is_unused_tensor).
  size_t unused_tensors() const { return unused_tensors_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() { return backend_; }
  ForwardOptions& options() { return options_; }

  // The K/V cache's element type: the one set_kv_dtype chose; else bf16 for a bf16 checkpoint
  // whose backend's attention takes a bf16 cache (what the checkpoint's own framework keeps, half
  // the bytes of f32), else f32.
  DType kv_dtype() const;
  // Asks for K/V elements of dtype t in states created from now on (f8e4m3: the
  // `memory.kv_cache_fp8` setting); an error naming the dtypes on offer when the backend's
  // attention does not take t.
  Status set_kv_dtype(DType t);
  // State for `cap` (its kv_dtype replaced by kv_dtype()).
  Result<ModelState> create_state(StateCapacity cap);

  // Advances every row's sequence by its tokens and returns host f32 logits: one row per token
  // (kAll) or per sequence, for its last token (kLast). Each row's sequence must hold a GDN slot;
  // forward reserves (through `state.reserve`) any K/V blocks a row still lacks for its new
  // tokens. The engine reserves ahead, so there this is a no-op and cannot fail mid-batch.
  // K/V is written only at positions from the sequence's length on, so full blocks before it
  // may be shared (the prefix cache) and are only read.
  Result<Tensor> forward(std::span<const SequenceInput> rows, LogitsMode mode, ModelState& state);
  // As forward, but the logits stay where the backend computed them (on an accelerator: device
  // memory, still being written by queued work), so that sampling can run there and only token
  // ids cross to the host.
  // A batch with a long row runs as passes of at most a tile of each row's tokens (prefill_tile),
  // so activations scale with the tile; the logits are laid out as one pass's would be (a pass
  // that fails leaves the rows advanced by the passes before it).
  Result<Tensor> forward_on_device(std::span<const SequenceInput> rows, LogitsMode mode, ModelState& state);
  // Whether the backend scores `tokens` tokens' targets natively (SequenceInput::score_targets):
  // its training facet's answer for the fused log-probabilities over this model's LM head.
  Support token_scoring(int64_t tokens) const;
  // The tile forward would run `rows` in (0: one pass), or why options().prefill_tile is invalid.
  Result<int64_t> prefill_tile(std::span<const SequenceInput> rows) const;

  // The device work of a decode forward on inputs already on the device: the embedding of `ids`
  // (one token a row of `bl`), every layer, the final norm and the LM head into `logits`
  // [bl.rows, vocab]; `lora`, where given, one stack a row (the adapters' deltas). Sequence lengths
  // do not advance. Calls only facets, allocates only temporaries and reads its inputs only from
  // the tensors given: what a decode replay records (model/decode_replay.h).
  Status decode_step(const Tensor& ids, const BatchLayout& bl, ModelState& state, const Tensor& logits,
                     std::span<const std::span<const LoraTerm>> lora = {});

  // One decoder layer on the residual `x` [tokens, hidden] (updated in place), for training,
  // which recomputes layers from checkpoints. `bl` is the rows' layout, their K/V blocks reserved;
  // the layer's GDN state slots are used as they are (zero them to start the sequences afresh).
  // Sequence lengths do not advance. `trace`, when given, receives the layer's internals.
  Status forward_layer(int64_t layer, std::span<const SequenceInput> rows, const BatchLayout& bl, ModelState& state,
                       const Tensor& x, LayerTrace* trace = nullptr);

 private:
  struct Workspace;
  Status attention_layer(const LayerWeights& L, int64_t layer, const BatchLayout& bl, ModelState& state, Workspace& ws);
  Status gdn_layer(const LayerWeights& L, int64_t layer, const BatchLayout& bl, ModelState& state, Workspace& ws);
  Status mlp(const LayerWeights& L, int64_t layer, Workspace& ws);
  // The GEMM operands written in the weights' 16-bit dtype by their producers (the norms before
  // the projections, the gated norm, silu-mul), each where the backend runs both ops so: buffers
  // in `ws` for a batch without adapters or a trace, none otherwise. The same bits as
  // the GEMMs' own rounding of f32 operands, one rounding pass and an f32 store fewer each.
  Status operands16(const BatchLayout& bl, Workspace& ws);
  Status decoder_layer(int64_t layer, const BatchLayout& bl, ModelState& state, Workspace& ws);
  Result<BatchLayout> build_layout(std::span<const SequenceInput> rows, ModelState& state);
  // forward_on_device in one pass, whatever the rows' lengths.
  Result<Tensor> forward_pass(std::span<const SequenceInput> rows, LogitsMode mode, ModelState& state);
  // The rows' score_targets scored on the final-normed residual `x` [tokens, hidden] (ws.h gets
  // the normed rows) into `logp` [tokens] on the device: one fused call per run of adjacent
  // scoring rows.
  Status score_targets(std::span<const SequenceInput> rows, Workspace& ws, const Tensor& logp);
  // Embedding, layers, final norm and LM head of the tokens `ids` laid out by `bl`, with the
  // rows' adapters; `logits` has one row per token (kAll) or per row (kLast); the rows'
  // score_targets scored into their scores.
  Status run(const Tensor& ids, const BatchLayout& bl, std::span<const SequenceInput> rows, LogitsMode mode,
             ModelState& state, const Tensor& logits);

  ModelConfig config_;
  size_t unused_tensors_ = 0;
  ModelWeights weights_;
  Backend& backend_;
  ForwardOptions options_;
  std::optional<DType> kv_dtype_;  // set_kv_dtype's choice
};

}  // namespace kiln
