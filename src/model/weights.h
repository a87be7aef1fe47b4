// The Qwen3.5 parameter set: the list of tensors a config implies (names, shapes, how model
// init draws them), and loading a checkpoint into the backend after validating all of them.
#pragma once

#include <string>
#include <vector>

#include "backend/facets.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace kiln {

enum class InitKind : uint8_t {
  kMatrix,           // N(0, 1/sqrt(fan_in))
  kEmbedding,        // N(0, 1/sqrt(hidden))
  kNormOffset,       // (1 + w) norms: N(0, 0.1) around zero
  kGatedNormWeight,  // plain-w GDN norm: 1 + N(0, 0.1)
  kALog,             // log(U(1, 16))
  kDtBias,           // N(0, 0.5)
  kConv,             // N(0, 1/sqrt(kernel))
};

struct TensorSpec {
  std::string name;  // without the checkpoint prefix ("layers.3.self_attn.q_proj.weight"); lm_head is global
  Shape shape;
  InitKind init;
  bool keep_f32;     // small parameters the kernels read as f32 whatever the checkpoint holds
};

// Every tensor of the text model, in checkpoint order; lm_head only when untied.
std::vector<TensorSpec> expected_tensors(const ModelConfig& c, bool with_lm_head);

struct AttentionWeights {
  Tensor q_proj;  // [Hq * hd * 2, H]: per head, hd query rows then hd gate rows
  Tensor k_proj;  // [Hkv * hd, H]
  Tensor v_proj;  // [Hkv * hd, H]
  Tensor o_proj;  // [H, Hq * hd]
  Tensor q_norm;  // [hd] f32, (1 + w)
  Tensor k_norm;  // [hd] f32, (1 + w)
};

struct GdnWeights {
  Tensor in_proj_qkv;  // [2 * Hk * dk + Hv * dv, H]
  Tensor in_proj_z;    // [Hv * dv, H]
  Tensor in_proj_a;    // [Hv, H]
  Tensor in_proj_b;    // [Hv, H]
  Tensor conv;         // [2 * Hk * dk + Hv * dv, K] f32 (checkpoint: [C, 1, K])
  Tensor a_log;        // [Hv] f32
  Tensor dt_bias;      // [Hv] f32
  Tensor norm;         // [dv] f32, plain w
  Tensor out_proj;     // [H, Hv * dv]
};

struct LayerWeights {
  LayerKind kind;
  Tensor input_norm, post_norm;        // [H] f32, (1 + w)
  Tensor gate_proj, up_proj;           // [I, H]
  Tensor down_proj;                    // [H, I]
  AttentionWeights attn;               // full-attention layers
  GdnWeights gdn;                      // linear-attention layers
};

struct ModelWeights {
  Tensor embed;       // [V, H]
  Tensor final_norm;  // [H] f32
  Tensor lm_head;     // [V, H]; the embedding itself when tied
  bool tied = false;
  std::vector<LayerWeights> layers;
  uint64_t matmul_bytes = 0;  // bytes of every projection a decode step reads, LM head included
  uint64_t arena_bytes = 0;   // the backend's weight arena holding every tensor above (0: none)

  std::vector<const Tensor*> tensors() const;  // every tensor above once (a tied head is the embedding)
};

// `first` and `second` as one [n1 + n2, k] weight where they lie back to back in memory (the
// weight arena's order, ModelWeights::tensors), else undefined: one GEMM instead of two.
Tensor stacked_rows(const Tensor& first, const Tensor& second);

// Tensors a checkpoint may carry that the text model does not use: a multimodal checkpoint's
// vision tower (model.visual.*, visual.*) and the multi-token-prediction head (mtp.*, model.mtp.*;
// Kiln decodes without speculative heads).
bool is_unused_tensor(const std::string& name);

// Validates every tensor (presence, shape, dtype; no unknown extras) before loading any, then
// loads them into the backend's weight arena (StorageFacet::weight_arena), where it has one.
Result<ModelWeights> load_weights(const ModelConfig& c, const Checkpoint& ckpt, StorageFacet& storage);

}  // namespace kiln
