#include "model/qwen35.h"

#include <algorithm>
#include <cmath>

#include "model/lora_batch.h"
#include "model/tiled_prefill.h"

namespace kiln {

Result<std::unique_ptr<Qwen35Model>> Qwen35Model::load(const std::string& dir, Backend& backend) {
  KILN_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir));
  KILN_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir, [](const std::string& n) { return !is_unused_tensor(n); }));
  KILN_ASSIGN_OR_RETURN(ModelWeights weights, load_weights(config, ckpt, backend.storage()));
  auto model = std::make_unique<Qwen35Model>(std::move(config), std::move(weights), backend);
  model->unused_tensors_ = ckpt.skipped();
  return model;
}

Qwen35Model::Qwen35Model(ModelConfig config, ModelWeights weights, Backend& backend)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend) {}

DType Qwen35Model::kv_dtype() const {
  if (kv_dtype_) return *kv_dtype_;
  const std::vector<DType>& offered = backend_.capabilities().attention.kv_dtypes;
  const bool bf16 = weights_.embed.dtype() == DType::kBF16 &&
                    std::find(offered.begin(), offered.end(), DType::kBF16) != offered.end();
  return bf16 ? DType::kBF16 : DType::kF32;
}

Status Qwen35Model::set_kv_dtype(DType t) {
  const std::vector<DType>& offered = backend_.capabilities().attention.kv_dtypes;
  if (std::find(offered.begin(), offered.end(), t) == offered.end()) {
    std::string names;
    for (DType d : offered) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
    return invalid_argument("K/V cache dtype " + std::string(dtype_name(t)) + ": the " + backend_.identity().name +
                            " backend keeps K/V in " + names + " only");
  }
  kv_dtype_ = t;
  return {};
}

Result<ModelState> Qwen35Model::create_state(StateCapacity cap) {
  cap.kv_dtype = kv_dtype();
  return ModelState::create(config_, backend_.storage(), cap);
}

// Activations of one forward, [tokens, ...] each, allocated on the backend per call, unfilled:
// each is written whole by the op that produces it before anything reads it.
struct Qwen35Model::Workspace {
  Tensor x, h;                                  // residual stream and normed input
  Tensor mixed, conv, z, a, b, core, normed;    // GDN; a and b are the halves of ab
  Tensor ab;                                    // [T, 2 * v_heads]: in_proj_a's outputs, then in_proj_b's
  Tensor qg, k, v, attn;                        // full attention
  Tensor gate, up;                              // MLP
  // GEMM operands their producers write in the weights' 16-bit dtype (Qwen35Model::operands16),
  // or undefined: the normed input of the projections, the gated norm's output for out_proj,
  // silu-mul's for down_proj.
  Tensor h16, normed16, act16;
  LoraBatch lora;                               // the rows' adapters (none: no work)
  LayerTrace* trace = nullptr;                  // forward_layer's: buffers kept, copies taken before in-place ops

  // The projections' x: the normed input, in 16 bits where it is written so.
  const Tensor& proj_in() const { return h16.defined() ? h16 : h; }
  // out += the rows' LoRA deltas of projection t (LoraBatch::apply); a traced forward keeps x A^T.
  Status adapt(LoraTarget t, int64_t layer, const Tensor& in, const Tensor& out) {
    return lora.apply(t, layer, in, out, trace ? &trace->lora_u[static_cast<size_t>(t)] : nullptr);
  }

  static Result<Workspace> create(const ModelConfig& c, int64_t T, StorageFacet& s) {
    Workspace w;
    const DType f = DType::kF32;
    KILN_ASSIGN_OR_RETURN(w.x, s.empty({T, c.hidden_size}, f));
    KILN_ASSIGN_OR_RETURN(w.h, s.empty({T, c.hidden_size}, f));
    if (c.count(LayerKind::kLinearAttention)) {
      KILN_ASSIGN_OR_RETURN(w.mixed, s.empty({T, c.gdn_conv_dim()}, f));
      KILN_ASSIGN_OR_RETURN(w.conv, s.empty({T, c.gdn_conv_dim()}, f));
      KILN_ASSIGN_OR_RETURN(w.z, s.empty({T, c.gdn_value_dim()}, f));
      const int64_t Hv = c.linear_num_value_heads;
      KILN_ASSIGN_OR_RETURN(w.ab, s.empty({T, 2 * Hv}, f));
      w.a = w.ab.as_strided({T, Hv}, {2 * Hv, 1});
      w.b = w.ab.as_strided({T, Hv}, {2 * Hv, 1}, Hv);
      KILN_ASSIGN_OR_RETURN(w.core, s.empty({T, c.linear_num_value_heads, c.linear_value_head_dim}, f));
      KILN_ASSIGN_OR_RETURN(w.normed, s.empty({T, c.gdn_value_dim()}, f));
    }
    if (c.count(LayerKind::kFullAttention)) {
      KILN_ASSIGN_OR_RETURN(w.qg, s.empty({T, c.q_proj_rows()}, f));
      KILN_ASSIGN_OR_RETURN(w.k, s.empty({T, c.num_kv_heads * c.head_dim}, f));
      KILN_ASSIGN_OR_RETURN(w.v, s.empty({T, c.num_kv_heads * c.head_dim}, f));
      KILN_ASSIGN_OR_RETURN(w.attn, s.empty({T, c.num_heads, c.head_dim}, f));
    }
    KILN_ASSIGN_OR_RETURN(w.gate, s.empty({T, c.intermediate_size}, f));
    KILN_ASSIGN_OR_RETURN(w.up, s.empty({T, c.intermediate_size}, f));
    return w;
  }
};

namespace {


// A [rows, width] view of `t` whose rows are `row_stride` elements apart, starting `offset` in.
Tensor rows_view(const Tensor& t, int64_t rows, int64_t width, int64_t row_stride, int64_t offset = 0) {
  return t.as_strided({rows, width}, {row_stride, 1}, offset);
}

Tensor heads_view(const Tensor& t, int64_t tokens, int64_t heads, int64_t dim, int64_t token_stride,
                  int64_t head_stride, int64_t offset = 0) {
  return t.as_strided({tokens, heads, dim}, {token_stride, head_stride, 1}, offset);
}

// dst = a fresh copy of the contiguous activation `src` (forward_layer's trace).
Status keep_copy(StorageFacet& s, const Tensor& src, Tensor& dst) {
  KILN_ASSIGN_OR_RETURN(dst, s.empty(src.shape(), src.dtype()));
  return s.copy(src, dst);
}

}  // namespace

Result<BatchLayout> Qwen35Model::build_layout(std::span<const SequenceInput> rows, ModelState& state) {
  HostBatchLayout h;
  h.block_size = ModelState::kBlockSize;
  for (const auto& r : rows) {
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    if (n == 0) return invalid_argument("forward: a row has no tokens");
    if (r.seq->slot < 0) return invalid_argument("forward: a row's sequence has no state slot");
    if (static_cast<int64_t>(r.score_targets.size()) != (r.score_targets.empty() ? 0 : n) ||
        r.scores.size() != r.score_targets.size())
      return invalid_argument("forward: a row's score_targets (" + std::to_string(r.score_targets.size()) +
                              ") and scores (" + std::to_string(r.scores.size()) + ") must both be empty or match its " +
                              std::to_string(n) + " tokens");
    KILN_RETURN_IF_ERROR(state.reserve(*r.seq, n));
    h.add_row(r.seq->length, n, r.seq->blocks, r.seq->slot);
  }
  return make_batch_layout(h, backend_.storage());
}

Status Qwen35Model::attention_layer(const LayerWeights& L, int64_t layer, const BatchLayout& bl, ModelState& state,
                                    Workspace& ws) {
  const auto& c = config_;
  const int64_t T = bl.tokens, Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t qrow = c.q_proj_rows(), per_head = c.attn_output_gate ? 2 * D : D;
  LinearFacet& lin = backend_.linear();
  KILN_RETURN_IF_ERROR(
      lin.matmul_group({ws.proj_in(), {L.attn.q_proj, L.attn.k_proj, L.attn.v_proj}, {ws.qg, ws.k, ws.v}}));
  KILN_RETURN_IF_ERROR(ws.adapt(LoraTarget::kQProj, layer, ws.h, ws.qg));
  KILN_RETURN_IF_ERROR(ws.adapt(LoraTarget::kKProj, layer, ws.h, ws.k));
  KILN_RETURN_IF_ERROR(ws.adapt(LoraTarget::kVProj, layer, ws.h, ws.v));
  if (ws.trace) {  // the q/k norms and RoPE below work in place
    KILN_RETURN_IF_ERROR(keep_copy(backend_.storage(), ws.qg, ws.trace->qg_raw));
    KILN_RETURN_IF_ERROR(keep_copy(backend_.storage(), ws.k, ws.trace->k_raw));
  }
  // q_proj rows per head: the query, then (when gated) the output gate.
  Tensor q = heads_view(ws.qg, T, Hq, D, qrow, per_head);
  Tensor gate = c.attn_output_gate ? heads_view(ws.qg, T, Hq, D, qrow, per_head, D) : Tensor();
  Tensor k = heads_view(ws.k, T, Hkv, D, Hkv * D, D);
  Tensor v = heads_view(ws.v, T, Hkv, D, Hkv * D, D);
  NormFacet& norm = backend_.norm();
  Tensor q_rows = rows_view(ws.qg, T * Hq, D, per_head);
  Tensor k_rows = rows_view(ws.k, T * Hkv, D, D);
  KILN_RETURN_IF_ERROR(norm.rms_norm({NormKind::kOnePlus, q_rows, {}, L.attn.q_norm, {}, q_rows, float(c.rms_norm_eps)}));
  KILN_RETURN_IF_ERROR(norm.rms_norm({NormKind::kOnePlus, k_rows, {}, L.attn.k_norm, {}, k_rows, float(c.rms_norm_eps)}));
  AttentionFacet& att = backend_.attention();
  KILN_RETURN_IF_ERROR(att.rope({q, k, bl.positions, c.rotary_dim(), float(c.rope_theta)}));
  KILN_RETURN_IF_ERROR(att.write_kv({k, v, state.k_cache(layer), state.v_cache(layer), bl.slot_mapping}));
  AttentionArgs attend{q, gate, ws.attn, state.k_cache(layer), state.v_cache(layer), &bl,
                       1.f / std::sqrt(static_cast<float>(D))};
  // A bf16 checkpoint's projections already round to bf16, so its attention products may too
  // (tensor cores); f32 checkpoints (the test fixtures) keep f32 attention.
  if (L.attn.q_proj.dtype() == DType::kBF16) attend.compute = DType::kBF16;
  if (ws.trace != nullptr) attend.kept = &ws.trace->attn_kept;
  KILN_RETURN_IF_ERROR(att.attend(attend));
  MatmulArgs o{ws.attn.reshape({T, Hq * D}), L.attn.o_proj, ws.x};
  o.accumulate = true;  // x += attn W_o^T
  KILN_RETURN_IF_ERROR(lin.matmul(o));
  return ws.adapt(LoraTarget::kOProj, layer, o.x, ws.x);
}

Status Qwen35Model::gdn_layer(const LayerWeights& L, int64_t layer, const BatchLayout& bl, ModelState& state,
                              Workspace& ws) {
  const auto& c = config_;
  const int64_t T = bl.tokens, Hk = c.linear_num_key_heads, dk = c.linear_key_head_dim;
  const int64_t Hv = c.linear_num_value_heads, dv = c.linear_value_head_dim, C = c.gdn_conv_dim();
  LinearFacet& lin = backend_.linear();
  // in_proj_a and in_proj_b (32 rows each at 4B) as one projection where they are adjacent.
  if (const Tensor ab = stacked_rows(L.gdn.in_proj_a, L.gdn.in_proj_b); ab.defined()) {
    KILN_RETURN_IF_ERROR(
        lin.matmul_group({ws.proj_in(), {L.gdn.in_proj_qkv, L.gdn.in_proj_z, ab}, {ws.mixed, ws.z, ws.ab}}));
  } else {
    KILN_RETURN_IF_ERROR(lin.matmul_group({ws.proj_in(),
                                           {L.gdn.in_proj_qkv, L.gdn.in_proj_z, L.gdn.in_proj_a, L.gdn.in_proj_b},
                                           {ws.mixed, ws.z, ws.a, ws.b}}));
  }
  KILN_RETURN_IF_ERROR(ws.adapt(LoraTarget::kInProjQkv, layer, ws.h, ws.mixed));
  KILN_RETURN_IF_ERROR(ws.adapt(LoraTarget::kInProjZ, layer, ws.h, ws.z));
  // out_proj's x: the gated norm's output, in 16 bits where operands16 gave it a buffer (a
  // prefill's, which takes the unfused path below).
  const Tensor& normed = ws.normed16.defined() ? ws.normed16 : ws.normed;
  // Decode: conv, delta rule and gated norm in one call where the backend has the fused step.
  GdnDecodeArgs d;
  if (bl.phase == Phase::kDecode) {
    d = {ws.mixed, L.gdn.conv, state.conv(layer), ws.z.reshape({T, Hv, dv}), ws.a, ws.b, L.gdn.a_log, L.gdn.dt_bias,
         state.recurrent(layer), L.gdn.norm, ws.normed.reshape({T, Hv, dv}), Hk, dk, float(c.rms_norm_eps), &bl};
  }
  if (bl.phase == Phase::kDecode && backend_.gdn().supports(describe(d)).runs_natively()) {
    KILN_RETURN_IF_ERROR(backend_.gdn().fused_decode(d));
  } else {
    KILN_RETURN_IF_ERROR(backend_.conv().causal_conv1d({ws.mixed, L.gdn.conv, state.conv(layer), ws.conv, &bl}));
    GdnArgs g;
    g.form = bl.phase == Phase::kDecode ? GdnForm::kRecurrent : options_.prefill_form;
    g.chunk = options_.gdn_chunk;
    g.q = heads_view(ws.conv, T, Hk, dk, C, dk);
    g.k = heads_view(ws.conv, T, Hk, dk, C, dk, Hk * dk);
    g.v = heads_view(ws.conv, T, Hv, dv, C, dv, 2 * Hk * dk);
    g.a = ws.a;
    g.b = ws.b;
    g.a_log = L.gdn.a_log;
    g.dt_bias = L.gdn.dt_bias;
    g.state = state.recurrent(layer);
    g.out = ws.core;
    g.layout = &bl;
    // As for attention: a bf16 checkpoint's projections already round to bf16, so the delta
    // rule's products may round too (f32 state and accumulation); f32 checkpoints (the fixtures)
    // and traced (training) forwards keep f32 products.
    if (L.gdn.in_proj_qkv.dtype() == DType::kBF16 && ws.trace == nullptr) g.compute = DType::kBF16;
    if (ws.trace != nullptr) g.kept = &ws.trace->gdn_kept;
    KILN_RETURN_IF_ERROR(backend_.gdn().delta_rule(g));
    Tensor core_rows = ws.core.reshape({T * Hv, dv});
    Tensor z_rows = ws.z.reshape({T * Hv, dv});
    Tensor out_rows = normed.reshape({T * Hv, dv});
    KILN_RETURN_IF_ERROR(backend_.norm().rms_norm(
        {NormKind::kGated, core_rows, {}, L.gdn.norm, z_rows, out_rows, float(c.rms_norm_eps)}));
  }
  MatmulArgs o{normed, L.gdn.out_proj, ws.x};
  o.accumulate = true;  // x += y W_out^T
  KILN_RETURN_IF_ERROR(lin.matmul(o));
  return ws.adapt(LoraTarget::kOutProj, layer, o.x, ws.x);
}

Status Qwen35Model::mlp(const LayerWeights& L, int64_t layer, Workspace& ws) {
  LinearFacet& lin = backend_.linear();
  KILN_RETURN_IF_ERROR(lin.matmul_group({ws.proj_in(), {L.gate_proj, L.up_proj}, {ws.gate, ws.up}}));
  if (ws.act16.defined()) {
    // silu(gate) * up rounded once, as the GEMM would round it: the same bits, one pass fewer.
    KILN_RETURN_IF_ERROR(backend_.elementwise().binary({ElementwiseOp::kSiluMul, ws.gate, ws.up, ws.act16}));
    MatmulArgs d{ws.act16, L.down_proj, ws.x};
    d.accumulate = true;
    return lin.matmul(d);  // no adapter in the batch (operands16's condition)
  }
  KILN_RETURN_IF_ERROR(ws.adapt(LoraTarget::kGateProj, layer, ws.h, ws.gate));
  KILN_RETURN_IF_ERROR(ws.adapt(LoraTarget::kUpProj, layer, ws.h, ws.up));
  // silu-mul runs in place, except in a traced forward, which keeps gate_proj's output as it is.
  Tensor act = ws.gate;
  if (ws.trace) {
    KILN_ASSIGN_OR_RETURN(act, backend_.storage().empty(ws.gate.shape(), ws.gate.dtype()));
    ws.trace->gate_raw = ws.gate, ws.trace->up = ws.up, ws.trace->act = act;
  }
  KILN_RETURN_IF_ERROR(backend_.elementwise().binary({ElementwiseOp::kSiluMul, ws.gate, ws.up, act}));
  MatmulArgs d{act, L.down_proj, ws.x};
  d.accumulate = true;
  KILN_RETURN_IF_ERROR(lin.matmul(d));
  return ws.adapt(LoraTarget::kDownProj, layer, act, ws.x);
}

Status Qwen35Model::operands16(const BatchLayout& bl, Workspace& ws) {
  const DType wt = weights_.layers.empty() ? DType::kF32 : weights_.layers[0].down_proj.dtype();
  const bool wt16 = wt == DType::kBF16 || wt == DType::kF16;
  if (!ws.lora.empty() || ws.trace != nullptr || !wt16) return {};
  for (const LayerWeights& L : weights_.layers) {  // one operand dtype serves every projection
    for (const Tensor* w : {&L.gate_proj, &L.up_proj, &L.down_proj, &L.attn.q_proj, &L.attn.k_proj, &L.attn.v_proj,
                            &L.gdn.in_proj_qkv, &L.gdn.in_proj_z, &L.gdn.in_proj_a, &L.gdn.in_proj_b, &L.gdn.out_proj})
      if (w->defined() && w->dtype() != wt) return {};
  }
  const auto& c = config_;
  const int64_t T = bl.tokens, H = c.hidden_size, I = c.intermediate_size;
  auto native = [](const Support& s) { return s.runs_natively(); };
  LinearFacet& lin = backend_.linear();
  StorageFacet& s = backend_.storage();
  // The projections read x in 16 bits (every projection of h has k = H; gate_proj stands for them;
  // a backend may decline decode-sized m, where its GEMV reads f32 x).
  if (native(backend_.norm().supports(NormRequest{NormKind::kOnePlus, T, H, DType::kF32, false, wt})) &&
      native(lin.supports(MatmulRequest{T, I, H, wt, wt, DType::kF32, false}))) {
    KILN_ASSIGN_OR_RETURN(ws.h16, s.empty({T, H}, wt));
  }
  const int64_t Hv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
  // The gated norm runs on its own in prefill; a decode step's is inside the fused GDN step.
  if (bl.phase == Phase::kPrefill && c.count(LayerKind::kLinearAttention) &&
      native(backend_.norm().supports(NormRequest{NormKind::kGated, T * Hv, dv, DType::kF32, false, wt})) &&
      native(lin.supports(MatmulRequest{T, H, Hv * dv, wt, wt, DType::kF32, true}))) {
    KILN_ASSIGN_OR_RETURN(ws.normed16, s.empty({T, Hv * dv}, wt));
  }
  if (native(backend_.elementwise().supports(ElementwiseRequest{ElementwiseOp::kSiluMul, T, I, DType::kF32, wt})) &&
      native(lin.supports(MatmulRequest{T, H, I, wt, wt, DType::kF32, true}))) {
    KILN_ASSIGN_OR_RETURN(ws.act16, s.empty({T, I}, wt));
  }
  return {};
}

// x += mixer(rms(x)); x += mlp(rms(x)).
Status Qwen35Model::decoder_layer(int64_t i, const BatchLayout& bl, ModelState& state, Workspace& ws) {
  const LayerWeights& L = weights_.layers[i];
  NormFacet& norm = backend_.norm();
  StorageFacet& s = backend_.storage();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  KILN_RETURN_IF_ERROR(norm.rms_norm({NormKind::kOnePlus, ws.x, {}, L.input_norm, {}, ws.proj_in(), eps}));
  if (L.kind == LayerKind::kFullAttention) KILN_RETURN_IF_ERROR(attention_layer(L, i, bl, state, ws));
  else KILN_RETURN_IF_ERROR(gdn_layer(L, i, bl, state, ws));
  if (ws.trace) {  // the trace keeps the mixer's input; the post norm writes a buffer of its own
    ws.trace->h_in = ws.h;
    KILN_ASSIGN_OR_RETURN(ws.h, s.empty(ws.h.shape(), ws.h.dtype()));
    KILN_RETURN_IF_ERROR(keep_copy(s, ws.x, ws.trace->x_mid));
  }
  KILN_RETURN_IF_ERROR(norm.rms_norm({NormKind::kOnePlus, ws.x, {}, L.post_norm, {}, ws.proj_in(), eps}));
  return mlp(L, i, ws);
}

Status Qwen35Model::forward_layer(int64_t layer, std::span<const SequenceInput> rows, const BatchLayout& bl,
                                  ModelState& state, const Tensor& x, LayerTrace* trace) {
  if (layer < 0 || layer >= config_.num_layers)
    return invalid_argument("forward_layer: layer " + std::to_string(layer) + " of a model with " +
                            std::to_string(config_.num_layers));
  if (x.rank() != 2 || x.dim(0) != bl.tokens || x.dim(1) != config_.hidden_size || !x.is_contiguous())
    return invalid_argument("forward_layer: x is " + x.describe() + ", expected a contiguous [" +
                            std::to_string(bl.tokens) + ", " + std::to_string(config_.hidden_size) + "]");
  KILN_ASSIGN_OR_RETURN(Workspace ws, Workspace::create(config_, bl.tokens, backend_.storage()));
  KILN_ASSIGN_OR_RETURN(ws.lora, LoraBatch::create(rows, config_, backend_));
  ws.x = x;
  ws.trace = trace;
  KILN_RETURN_IF_ERROR(decoder_layer(layer, bl, state, ws));
  if (trace) {
    LayerTrace& t = *trace;
    t.h_post = ws.h;
    if (weights_.layers[layer].kind == LayerKind::kFullAttention) {
      t.qg = ws.qg, t.k = ws.k, t.v = ws.v, t.attn = ws.attn;
    } else {
      t.mixed = ws.mixed, t.conv = ws.conv, t.z = ws.z, t.a = ws.a, t.b = ws.b, t.core = ws.core, t.normed = ws.normed;
    }
  }
  return {};
}

Result<Tensor> Qwen35Model::forward(std::span<const SequenceInput> rows, LogitsMode mode, ModelState& state) {
  KILN_ASSIGN_OR_RETURN(Tensor logits, forward_on_device(rows, mode, state));
  if (logits.device().kind == DeviceKind::kHost) return logits;
  Tensor host = Tensor::empty(logits.shape(), DType::kF32);
  KILN_RETURN_IF_ERROR(backend_.storage().copy_to_host(logits, host));
  return host;
}

Support Qwen35Model::token_scoring(int64_t tokens) const {
  TrainRequest r;
  r.op = TrainOp::kTokenLogprobs;
  r.tokens = tokens;
  r.width = config_.hidden_size;
  r.out = weights_.lm_head.dim(0);
  r.dtype = weights_.lm_head.dtype();
  return backend_.training().supports(r);
}

Result<int64_t> Qwen35Model::prefill_tile(std::span<const SequenceInput> rows) const {
  KILN_ASSIGN_OR_RETURN(PrefillTiling t,
                        resolve_prefill_tiling(backend_.capabilities().streaming_prefill, options_.prefill_tile));
  return prefill_tile_for(rows, t);
}

Result<Tensor> Qwen35Model::forward_on_device(std::span<const SequenceInput> rows, LogitsMode mode,
                                              ModelState& state) {
  if (rows.empty()) return invalid_argument("forward: no rows");
  KILN_ASSIGN_OR_RETURN(int64_t tile, prefill_tile(rows));
  if (tile == 0) return forward_pass(rows, mode, state);
  return tiled_prefill(rows, mode, tile, config_.vocab_size, backend_.storage(),
                       [&](std::span<const SequenceInput> part, LogitsMode m) { return forward_pass(part, m, state); });
}

Result<Tensor> Qwen35Model::forward_pass(std::span<const SequenceInput> rows, LogitsMode mode, ModelState& state) {
  KILN_ASSIGN_OR_RETURN(BatchLayout bl, build_layout(rows, state));
  StorageFacet& s = backend_.storage();
  std::vector<int32_t> ids;
  for (const auto& r : rows) ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
  KILN_ASSIGN_OR_RETURN(Tensor dev_ids, s.upload(Tensor::from_values(ids, {bl.tokens})));
  KILN_ASSIGN_OR_RETURN(Tensor logits,
                        s.allocate({mode == LogitsMode::kLast ? bl.rows : bl.tokens, config_.vocab_size}, DType::kF32));
  KILN_RETURN_IF_ERROR(run(dev_ids, bl, rows, mode, state, logits));
  for (const auto& r : rows) r.seq->length += static_cast<int64_t>(r.tokens.size());
  return logits;
}

Status Qwen35Model::decode_step(const Tensor& ids, const BatchLayout& bl, ModelState& state, const Tensor& logits,
                               std::span<const std::span<const LoraTerm>> lora) {
  if (bl.phase != Phase::kDecode || bl.rows != bl.tokens)
    return invalid_argument("decode_step: the layout is not one token a row (" + std::to_string(bl.rows) + " rows, " +
                            std::to_string(bl.tokens) + " tokens)");
  if (lora.empty()) return run(ids, bl, {}, LogitsMode::kLast, state, logits);
  if (static_cast<int64_t>(lora.size()) != bl.rows)
    return invalid_argument("decode_step: " + std::to_string(lora.size()) + " adapter stacks for " +
                            std::to_string(bl.rows) + " rows");
  // The rows as the LoRA grouping reads them: one token each (its value is never read) and a stack.
  static const int32_t kOneToken = 0;
  std::vector<SequenceInput> rows;
  rows.reserve(lora.size());
  for (std::span<const LoraTerm> stack : lora) rows.push_back({nullptr, std::span<const int32_t>(&kOneToken, 1), stack});
  return run(ids, bl, rows, LogitsMode::kLast, state, logits);
}

Status Qwen35Model::score_targets(std::span<const SequenceInput> rows, Workspace& ws, const Tensor& logp) {
  StorageFacet& s = backend_.storage();
  KILN_RETURN_IF_ERROR(backend_.norm().rms_norm({NormKind::kOnePlus, ws.x, {}, weights_.final_norm, {}, ws.h,
                                                 static_cast<float>(config_.rms_norm_eps)}));
  // Runs [t0, t1) of adjacent scoring rows' tokens, each one call.
  int64_t t = 0;
  for (size_t r = 0; r < rows.size();) {
    if (rows[r].score_targets.empty()) {
      t += static_cast<int64_t>(rows[r++].tokens.size());
      continue;
    }
    const int64_t t0 = t;
    std::vector<int32_t> targets;
    for (; r < rows.size() && !rows[r].score_targets.empty(); ++r) {
      targets.insert(targets.end(), rows[r].score_targets.begin(), rows[r].score_targets.end());
      t += static_cast<int64_t>(rows[r].tokens.size());
    }
    KILN_ASSIGN_OR_RETURN(Tensor dev_targets, s.upload(Tensor::from_values(targets, {t - t0})));
    KILN_ASSIGN_OR_RETURN(Tensor lse, s.empty({t - t0}, DType::kF32));
    KILN_RETURN_IF_ERROR(backend_.training().token_logprobs(
        {ws.h.slice(0, t0, t), weights_.lm_head, dev_targets, logp.slice(0, t0, t), lse}));
  }
  return {};
}

Status Qwen35Model::run(const Tensor& ids, const BatchLayout& bl, std::span<const SequenceInput> rows, LogitsMode mode,
                        ModelState& state, const Tensor& logits) {
  const auto& c = config_;
  const int64_t T = bl.tokens, H = c.hidden_size;
  StorageFacet& s = backend_.storage();
  KILN_ASSIGN_OR_RETURN(Workspace ws, Workspace::create(c, T, s));
  KILN_ASSIGN_OR_RETURN(ws.lora, LoraBatch::create(rows, c, backend_));
  KILN_RETURN_IF_ERROR(operands16(bl, ws));
  KILN_RETURN_IF_ERROR(backend_.elementwise().embed({ids, weights_.embed, ws.x}));
  for (int64_t i = 0; i < c.num_layers; ++i) KILN_RETURN_IF_ERROR(decoder_layer(i, bl, state, ws));
  Tensor logp;  // the rows' scores on the device, where any row asks for them
  if (std::any_of(rows.begin(), rows.end(), [](const SequenceInput& r) { return !r.score_targets.empty(); })) {
    KILN_ASSIGN_OR_RETURN(logp, s.allocate({T}, DType::kF32));
    KILN_RETURN_IF_ERROR(score_targets(rows, ws, logp));
  }

  // The rows whose logits are wanted: every token, or each sequence's last.
  // A batch of one token per row (decode) already has exactly those rows.
  Tensor final_in = ws.x;
  if (mode == LogitsMode::kLast && bl.rows != T) {
    KILN_ASSIGN_OR_RETURN(final_in, s.allocate({bl.rows, H}, DType::kF32));
    int64_t t = 0;
    for (int64_t r = 0; r < bl.rows; ++r) {
      t += static_cast<int64_t>(rows[r].tokens.size());
      // A one-row add of zero is a device-side row copy through the facet.
      Tensor src = ws.x.slice(0, t - 1, t), dst = final_in.slice(0, r, r + 1);
      KILN_RETURN_IF_ERROR(backend_.elementwise().binary({ElementwiseOp::kAdd, src, dst, dst}));
    }
  }
  const int64_t R = final_in.dim(0);
  if (logits.rank() != 2 || logits.dim(0) != R || logits.dim(1) != c.vocab_size)
    return invalid_argument("forward: logits is " + logits.describe() + ", expected [" + std::to_string(R) + ", " +
                            std::to_string(c.vocab_size) + "]");
  Tensor normed = ws.h.slice(0, 0, R);
  KILN_RETURN_IF_ERROR(backend_.norm().rms_norm(
      {NormKind::kOnePlus, final_in, {}, weights_.final_norm, {}, normed, static_cast<float>(c.rms_norm_eps)}));
  KILN_RETURN_IF_ERROR(backend_.linear().matmul({normed, weights_.lm_head, logits}));
  if (!logp.defined()) return {};
  Tensor host = Tensor::empty({T}, DType::kF32);
  KILN_RETURN_IF_ERROR(s.copy_to_host(logp, host));
  int64_t t = 0;
  for (const SequenceInput& r : rows) {
    std::copy_n(host.data<float>() + t, r.scores.size(), r.scores.begin());
    t += static_cast<int64_t>(r.tokens.size());
  }
  return {};
}

}  // namespace kiln
