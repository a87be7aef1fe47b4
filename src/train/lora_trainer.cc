// The LoRA backward through the Qwen3.5 forward, written against the training facet. forward()
// runs the model layer by layer (Qwen35Model::forward_layer, the serving code itself). The first
// layers keep their traces (their internals, LayerTrace) while these fit in
// TrainerOptions::trace_budget_bytes; from the first that does not fit on, it keeps the residual
// stream entering every `checkpoint_every`-th layer. backward() walks the checkpointed segments
// in reverse, recomputes each segment's layer inputs from its checkpoint, then each layer once
// more with its internals traced, and back-propagates through it: MLP, post norm, mixer, input
// norm; then the traced layers, with no recomputation. Every projection passes dX += dY W through
// its frozen weight; an adapted one also accumulates its factors' gradients, and projections that
// read one input (q/k/v, in_proj_qkv/z, gate/up) take their factor products as one: their A
// factors side by side, so that x is read once for u = x A^T, once for dA and dX once updated.
// Each example is a row of the layout, the examples packed into one sequence included: the
// layout's row boundaries are what keeps attention and the GDN state from one to the next.
#include "train/lora_trainer.h"

#include <cmath>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln {

namespace {

// Everything one batch of sequences needs to run layer by layer: a row per example (a sequence,
// or each example packed into one), each from an empty state (K/V blocks reserved, GDN slots
// zeroed before every layer's run), the layout, the rows.
struct Pass {
  std::optional<ModelState> state;
  std::vector<SequenceState> seqs;  // one per row
  std::vector<SequenceInput> rows;
  BatchLayout layout;
  std::vector<int64_t> offsets;  // first token of each sequence in the batch
  std::vector<char> row_start;   // [tokens]: 1 at the first token of each row, which nothing predicts
  int64_t tokens = 0;
  Tensor targets;                // [tokens] i32: the next token, -1 at each row's last position
  // Kept by forward(kTrain) for backward:
  struct Traced {
    Tensor input;      // the residual entering the layer
    LayerTrace trace;  // its internals
  };
  std::vector<Traced> traced;  // layers [0, traced.size()); the rest are checkpointed:
  // the residual entering layer i >= traced.size() where (i - traced.size()) % checkpoint_every == 0
  std::vector<Tensor> checkpoints;
  Tensor x_final, normed, lse;      // [tokens, hidden] residual after the last layer, final-normed; [tokens]
};

// Bytes of a trace's tensors, each by its own size (a and b are the two halves of one buffer).
size_t trace_bytes(const LayerTrace& t) {
  size_t n = 0;
  for (const Tensor* x : {&t.h_in, &t.x_mid, &t.h_post, &t.qg_raw, &t.k_raw, &t.qg, &t.k, &t.v, &t.attn, &t.mixed,
                          &t.conv, &t.z, &t.a, &t.b, &t.core, &t.normed, &t.gdn_kept, &t.gate_raw, &t.up, &t.act})
    if (x->defined()) n += x->nbytes();
  for (const Tensor& u : t.lora_u)
    if (u.defined()) n += u.nbytes();
  return n;
}

// The LoRA targets whose projections read one input (q/k/v, in_proj_qkv/z, gate/up), each in the
// order the backward takes them.
constexpr LoraTarget kAttentionInputs[] = {LoraTarget::kQProj, LoraTarget::kKProj, LoraTarget::kVProj};
constexpr LoraTarget kGdnInputs[] = {LoraTarget::kInProjQkv, LoraTarget::kInProjZ};
constexpr LoraTarget kMlpInputs[] = {LoraTarget::kGateProj, LoraTarget::kUpProj};
constexpr std::span<const LoraTarget> kGroups[] = {kAttentionInputs, kGdnInputs, kMlpInputs};

// One projection of a group sharing x: its frozen weight, the gradient of its output and its
// LoRA target (none: a frozen projection only).
struct Projection {
  std::optional<LoraTarget> target;
  const Tensor& w;
  const Tensor& dy;
};

class TrainerImpl final : public LoraTrainer {
 public:
  TrainerImpl(Qwen35Model& model, LoraAdapter& adapter, LoraAdapter grads, TrainerOptions opts, int64_t trace_budget)
      : model_(model), adapter_(adapter), grads_(std::move(grads)), opts_(opts), trace_budget_(trace_budget),
        term_{&adapter, 1.f} {}
  Status stack_group_grads();

  Result<std::vector<std::vector<float>>> forward(std::span<const TrainSequence> seqs, ForwardPass pass) override;
  Status backward(const std::vector<std::vector<float>>& coef) override;
  LoraAdapter& grads() override { return grads_; }
  int64_t traced_layers() const override { return kept_ ? static_cast<int64_t>(kept_->traced.size()) : 0; }
  Status zero_grads() override {
    for (int64_t l = 0; l < grads_.num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        LoraFactors& f = grads_.factors(l, static_cast<LoraTarget>(t));
        if (!f.defined()) continue;
        KILN_RETURN_IF_ERROR(storage().zero(f.a));
        KILN_RETURN_IF_ERROR(storage().zero(f.b));
      }
    return {};
  }

 private:
  StorageFacet& storage() { return model_.backend().storage(); }
  TrainingFacet& train() { return model_.backend().training(); }
  Result<Tensor> alloc(Shape shape) { return storage().allocate(shape, DType::kF32); }  // zero-filled
  // Unfilled (StorageFacet::empty): for a buffer whose next op, not accumulating, writes all of it.
  Result<Tensor> scratch(Shape shape) { return storage().empty(shape, DType::kF32); }
  Result<Tensor> copy_of(const Tensor& t) {
    KILN_ASSIGN_OR_RETURN(Tensor c, scratch(t.shape()));
    KILN_RETURN_IF_ERROR(storage().copy(t, c));
    return c;
  }

  Result<std::unique_ptr<Pass>> prepare(std::span<const TrainSequence> seqs, bool with_adapter);
  Status run_layer(Pass& p, int64_t layer, const Tensor& x, LayerTrace* trace);
  // The layer's output, run on a copy of x, so that x stays the layer's input.
  Result<Tensor> run_copy(Pass& p, int64_t layer, const Tensor& x, LayerTrace* trace) {
    KILN_ASSIGN_OR_RETURN(Tensor out, copy_of(x));
    KILN_RETURN_IF_ERROR(run_layer(p, layer, out, trace));
    return out;
  }
  Status layer_backward(Pass& p, int64_t layer, const LayerTrace& tr, const Tensor& x_in, const Tensor& dx);
  Status attention_backward(Pass& p, int64_t layer, const LayerTrace& tr, const Tensor& dx, const Tensor& dh);
  Status gdn_backward(Pass& p, int64_t layer, const LayerTrace& tr, const Tensor& dx, const Tensor& dh);
  // dX (+)= sum_i dY_i W_i over projections reading x, and their factors' gradients (several
  // adapted ones: a group of kGroups, laid out by stack_group_grads). x A^T comes from the trace
  // where the forward kept it.
  Status projections_backward(const LayerTrace& tr, int64_t layer, std::initializer_list<Projection> projections,
                              const Tensor& x, const Tensor& dx, bool accumulate);

  Qwen35Model& model_;
  LoraAdapter& adapter_;
  LoraAdapter grads_;
  TrainerOptions opts_;
  int64_t trace_budget_;  // opts_.trace_budget_bytes, resolved
  LoraTerm term_;
  std::unique_ptr<Pass> kept_;  // the last forward(kTrain)
};

// The gradients' A factors of each group's adapted projections become views of one buffer, side
// by side in the group's order, so that one GEMM writes the group's dA.
Status TrainerImpl::stack_group_grads() {
  for (int64_t l = 0; l < grads_.num_layers(); ++l)
    for (std::span<const LoraTarget> group : kGroups) {
      int64_t rows = 0, members = 0, in = 0;
      for (LoraTarget t : group)
        if (const LoraFactors& f = grads_.factors(l, t); f.defined()) rows += f.a.dim(0), ++members, in = f.a.dim(1);
      if (members < 2) continue;
      KILN_ASSIGN_OR_RETURN(Tensor stack, storage().allocate({rows, in}, DType::kF32));
      int64_t at = 0;
      for (LoraTarget t : group)
        if (LoraFactors& f = grads_.factors(l, t); f.defined()) {
          const int64_t r = f.a.dim(0);
          f.a = stack.slice(0, at, at + r);
          at += r;
        }
    }
  return {};
}

Result<std::unique_ptr<Pass>> TrainerImpl::prepare(std::span<const TrainSequence> seqs, bool with_adapter) {
  if (seqs.empty()) return invalid_argument("LoraTrainer::forward: no sequences");
  const ModelConfig& c = model_.config();
  auto p = std::make_unique<Pass>();
  int64_t blocks = 0;
  std::vector<int32_t> targets;
  std::vector<std::span<const int32_t>> examples;  // the rows' tokens
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& s = seqs[i];
    const std::string where = "LoraTrainer::forward: sequence " + std::to_string(i);
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (n < 2) return invalid_argument(where + " has " + std::to_string(n) + " tokens, at least 2 are needed");
    if (s.roles.size() != s.tokens.size())
      return invalid_argument(where + " has " + std::to_string(s.roles.size()) + " roles for " + std::to_string(n) +
                              " tokens");
    for (int64_t t = 0; t < n; ++t)
      if (s.tokens[t] < 0 || s.tokens[t] >= c.vocab_size)
        return invalid_argument(where + " token " + std::to_string(t) + " is " + std::to_string(s.tokens[t]) +
                                ", outside the vocabulary of " + std::to_string(c.vocab_size));
    const std::vector<int64_t> lengths = s.packed.empty() ? std::vector<int64_t>{n} : s.packed;
    int64_t sum = 0;
    for (size_t e = 0; e < lengths.size(); ++e) {
      if (lengths[e] < 2)
        return invalid_argument(where + ": packed example " + std::to_string(e) + " has " + std::to_string(lengths[e]) +
                                " tokens, at least 2 are needed");
      sum += lengths[e];
    }
    if (sum != n)
      return invalid_argument(where + ": its packed examples hold " + std::to_string(sum) + " tokens, the sequence " +
                              std::to_string(n));
    p->offsets.push_back(p->tokens);
    p->row_start.resize(static_cast<size_t>(p->tokens + n), 0);
    int64_t at = 0;
    for (int64_t len : lengths) {
      p->row_start[static_cast<size_t>(p->tokens + at)] = 1;
      examples.push_back(std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(at), static_cast<size_t>(len)));
      blocks += (len + ModelState::kBlockSize - 1) / ModelState::kBlockSize;
      for (int64_t t = 0; t < len; ++t) targets.push_back(t + 1 < len ? s.tokens[at + t + 1] : -1);
      at += len;
    }
    p->tokens += n;
  }
  StateCapacity cap;
  cap.max_sequences = static_cast<int64_t>(examples.size());
  cap.kv_blocks = blocks;
  KILN_ASSIGN_OR_RETURN(ModelState st, model_.create_state(cap));
  p->state.emplace(std::move(st));
  HostBatchLayout h;
  h.block_size = ModelState::kBlockSize;
  p->seqs.reserve(examples.size());  // the rows point into it: no reallocation past here
  for (const auto& e : examples) {
    KILN_ASSIGN_OR_RETURN(SequenceState seq, p->state->new_sequence());
    KILN_RETURN_IF_ERROR(p->state->reserve(seq, static_cast<int64_t>(e.size())));
    p->seqs.push_back(std::move(seq));
  }
  for (size_t i = 0; i < examples.size(); ++i) {
    h.add_row(0, static_cast<int64_t>(examples[i].size()), p->seqs[i].blocks, p->seqs[i].slot);
    SequenceInput row{&p->seqs[i], examples[i]};
    if (with_adapter) row.lora = std::span<const LoraTerm>(&term_, 1);
    p->rows.push_back(row);
  }
  KILN_ASSIGN_OR_RETURN(p->layout, make_batch_layout(h, storage()));
  KILN_ASSIGN_OR_RETURN(p->targets, storage().upload(Tensor::from_values(targets, {p->tokens})));
  return p;
}

Status TrainerImpl::run_layer(Pass& p, int64_t layer, const Tensor& x, LayerTrace* trace) {
  if (model_.config().layer_types[layer] == LayerKind::kLinearAttention) {  // every sequence starts afresh
    KILN_RETURN_IF_ERROR(storage().zero(p.state->recurrent(layer)));
    KILN_RETURN_IF_ERROR(storage().zero(p.state->conv(layer)));
  }
  return model_.forward_layer(layer, p.rows, p.layout, *p.state, x, trace);
}

Result<std::vector<std::vector<float>>> TrainerImpl::forward(std::span<const TrainSequence> seqs, ForwardPass pass) {
  const bool with_adapter = pass != ForwardPass::kReference, keep = pass == ForwardPass::kTrain;
  if (keep) kept_.reset();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Pass> p, prepare(seqs, with_adapter));
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const int64_t T = p->tokens, every = std::max<int64_t>(opts_.checkpoint_every, 1);

  std::vector<int32_t> ids;
  for (const auto& s : seqs) ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  KILN_ASSIGN_OR_RETURN(Tensor dev_ids, storage().upload(Tensor::from_values(ids, {T})));
  KILN_ASSIGN_OR_RETURN(Tensor x, scratch({T, c.hidden_size}));
  KILN_RETURN_IF_ERROR(model_.backend().elementwise().embed({dev_ids, w.embed, x}));
  bool tracing = keep && trace_budget_ > 0;
  int64_t traced_bytes = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (tracing) {
      LayerTrace tr;
      KILN_ASSIGN_OR_RETURN(Tensor next, run_copy(*p, i, x, &tr));
      traced_bytes += static_cast<int64_t>(trace_bytes(tr) + x.nbytes());
      if (traced_bytes <= trace_budget_) {
        p->traced.push_back({x, std::move(tr)});
      } else {  // over the budget: this trace goes, the layers from here on are checkpointed
        tracing = false;
        p->checkpoints.push_back(x);
      }
      x = next;
      continue;
    }
    if (keep && (i - static_cast<int64_t>(p->traced.size())) % every == 0) {
      KILN_ASSIGN_OR_RETURN(Tensor ckpt, copy_of(x));
      p->checkpoints.push_back(ckpt);
    }
    KILN_RETURN_IF_ERROR(run_layer(*p, i, x, nullptr));
  }
  KILN_ASSIGN_OR_RETURN(p->normed, scratch({T, c.hidden_size}));
  KILN_RETURN_IF_ERROR(model_.backend().norm().rms_norm(
      {NormKind::kOnePlus, x, {}, w.final_norm, {}, p->normed, static_cast<float>(c.rms_norm_eps)}));
  KILN_ASSIGN_OR_RETURN(Tensor logp, alloc({T}));
  KILN_ASSIGN_OR_RETURN(p->lse, alloc({T}));
  KILN_RETURN_IF_ERROR(train().token_logprobs({p->normed, w.lm_head, p->targets, logp, p->lse}));
  p->x_final = x;

  Tensor host = Tensor::empty({T}, DType::kF32);
  KILN_RETURN_IF_ERROR(storage().copy_to_host(logp, host));
  std::vector<std::vector<float>> out(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t n = static_cast<int64_t>(seqs[s].tokens.size()), at = p->offsets[s];
    out[s].assign(static_cast<size_t>(n), 0.f);
    for (int64_t t = 1; t < n; ++t)  // predicted at t - 1, within its row
      if (!p->row_start[static_cast<size_t>(at + t)]) out[s][t] = host.data<float>()[at + t - 1];
  }
  if (keep) kept_ = std::move(p);
  return out;
}

// dX (+)= dY W through each frozen weight; for the adapted projections (u = x A^T, c = scale):
// dB += c dY^T u, dA += c (dY B)^T x, dX += c (dY B) A, the group's factors side by side
// (A = [A_1; A_2; ...], u = x A^T and dY B as [T, sum of ranks]), so that each is one GEMM.
Status TrainerImpl::projections_backward(const LayerTrace& tr, int64_t layer,
                                         std::initializer_list<Projection> projections, const Tensor& x,
                                         const Tensor& dx, bool accumulate) {
  struct Adapted {
    const LoraFactors& f;
    LoraFactors& g;
    const Tensor& dy;
    int64_t at;     // first row of its factors in the stack
    Tensor u;       // x A^T, [T, r]
  };
  bool kept = true;  // every adapted projection's x A^T kept by the forward
  std::vector<Adapted> adapted;
  int64_t rows = 0;
  for (const Projection& p : projections) {
    GemmArgs base{p.dy, p.w, dx};
    base.accumulate = accumulate;
    KILN_RETURN_IF_ERROR(train().gemm(base));
    accumulate = true;
    if (!p.target || !adapter_.factors(layer, *p.target).defined()) continue;
    adapted.push_back({adapter_.factors(layer, *p.target), grads_.factors(layer, *p.target), p.dy, rows,
                       tr.lora_u[static_cast<size_t>(*p.target)]});
    rows += adapted.back().f.a.dim(0);
    kept = kept && adapted.back().u.defined();
  }
  if (adapted.empty()) return {};
  Tensor da = adapted[0].g.a;  // the group's A gradients as one [sum of ranks, in] view
  for (size_t i = 1; i < adapted.size() && da.defined(); ++i) da = stacked_rows(da, adapted[i].g.a);
  if (!da.defined())
    return internal_error("LoraTrainer: layer " + std::to_string(layer) + " has adapted projections sharing x " +
                          "whose A gradients are not side by side");
  Tensor a = adapted[0].f.a;
  const float c = adapter_.scale();
  const int64_t T = x.dim(0);
  if (adapted.size() > 1) {
    KILN_ASSIGN_OR_RETURN(a, scratch({rows, x.dim(1)}));
    for (const Adapted& m : adapted)
      KILN_RETURN_IF_ERROR(storage().copy(m.f.a, a.slice(0, m.at, m.at + m.f.a.dim(0))));
  }
  if (!kept) {
    KILN_ASSIGN_OR_RETURN(Tensor u, scratch({T, rows}));
    GemmArgs xa{x, a, u};
    xa.trans_b = true;
    KILN_RETURN_IF_ERROR(train().gemm(xa));  // u = x A^T
    for (Adapted& m : adapted) m.u = u.as_strided({T, m.f.a.dim(0)}, {rows, 1}, m.at);
  }
  KILN_ASSIGN_OR_RETURN(Tensor gb, scratch({T, rows}));
  for (const Adapted& m : adapted) {
    const Tensor gbm = gb.as_strided({T, m.f.a.dim(0)}, {rows, 1}, m.at);
    GemmArgs db{m.dy, m.u, m.g.b};
    db.trans_a = true, db.alpha = c, db.accumulate = true;
    KILN_RETURN_IF_ERROR(train().gemm(db));
    KILN_RETURN_IF_ERROR(train().gemm({m.dy, m.f.b, gbm}));  // dY B
  }
  GemmArgs dag{gb, x, da};
  dag.trans_a = true, dag.alpha = c, dag.accumulate = true;
  KILN_RETURN_IF_ERROR(train().gemm(dag));
  GemmArgs dxa{gb, a, dx};
  dxa.alpha = c, dxa.accumulate = true;
  return train().gemm(dxa);
}

Status TrainerImpl::attention_backward(Pass& p, int64_t layer, const LayerTrace& tr, const Tensor& dx,
                                       const Tensor& dh) {
  const ModelConfig& c = model_.config();
  const AttentionWeights& W = model_.weights().layers[layer].attn;
  const int64_t T = p.tokens, Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t qrow = c.q_proj_rows(), per_head = c.attn_output_gate ? 2 * D : D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto heads = [&](const Tensor& t, int64_t h, int64_t ts, int64_t hs, int64_t off) {
    return t.as_strided({T, h, D}, {ts, hs, 1}, off);
  };
  KILN_ASSIGN_OR_RETURN(Tensor dattn, scratch({T, Hq * D}));
  KILN_RETURN_IF_ERROR(projections_backward(tr, layer, {{LoraTarget::kOProj, W.o_proj, dx}},
                                            tr.attn.reshape({T, Hq * D}), dattn, false));
  KILN_ASSIGN_OR_RETURN(Tensor dqg, alloc({T, qrow}));
  KILN_ASSIGN_OR_RETURN(Tensor dk, alloc({T, Hkv * D}));
  KILN_ASSIGN_OR_RETURN(Tensor dv, alloc({T, Hkv * D}));
  AttentionBackwardArgs ab;
  ab.q = heads(tr.qg, Hq, qrow, per_head, 0);
  ab.k = heads(tr.k, Hkv, Hkv * D, D, 0);
  ab.v = heads(tr.v, Hkv, Hkv * D, D, 0);
  ab.dout = dattn.reshape({T, Hq, D});
  ab.dq = heads(dqg, Hq, qrow, per_head, 0);
  ab.dk = heads(dk, Hkv, Hkv * D, D, 0);
  ab.dv = heads(dv, Hkv, Hkv * D, D, 0);
  if (c.attn_output_gate) {
    ab.gate = heads(tr.qg, Hq, qrow, per_head, D);
    ab.dgate = heads(dqg, Hq, qrow, per_head, D);
  }
  if (tr.attn_kept.defined()) {  // the forward's softmax statistics: the backend need not recompute them
    ab.out = tr.attn.reshape({T, Hq, D});
    ab.kept = tr.attn_kept;
  }
  ab.layout = &p.layout;
  ab.scale = 1.f / std::sqrt(static_cast<float>(D));
  // As in the forward: a bf16 checkpoint's attention products may run at reduced precision.
  if (W.q_proj.dtype() == DType::kBF16) ab.compute = DType::kBF16;
  KILN_RETURN_IF_ERROR(train().attention_backward(ab));
  KILN_RETURN_IF_ERROR(train().rope_backward({ab.dq, ab.dk, p.layout.positions, c.rotary_dim(), float(c.rope_theta)}));
  // The q/k norms, in place on the gradients (the norm backward reads each element before writing it).
  auto rows = [](const Tensor& t, int64_t n, int64_t width, int64_t stride) {
    return t.as_strided({n, width}, {stride, 1});
  };
  NormBackwardArgs qn;
  qn.x = rows(tr.qg_raw, T * Hq, D, per_head);
  qn.weight = W.q_norm;
  qn.dout = qn.dx = rows(dqg, T * Hq, D, per_head);
  qn.eps = eps;
  KILN_RETURN_IF_ERROR(train().norm_backward(qn));
  NormBackwardArgs kn;
  kn.x = rows(tr.k_raw, T * Hkv, D, D);
  kn.weight = W.k_norm;
  kn.dout = kn.dx = rows(dk, T * Hkv, D, D);
  kn.eps = eps;
  KILN_RETURN_IF_ERROR(train().norm_backward(kn));
  return projections_backward(tr, layer,
                              {{LoraTarget::kQProj, W.q_proj, dqg},
                               {LoraTarget::kKProj, W.k_proj, dk},
                               {LoraTarget::kVProj, W.v_proj, dv}},
                              tr.h_in, dh, false);
}

Status TrainerImpl::gdn_backward(Pass& p, int64_t layer, const LayerTrace& tr, const Tensor& dx, const Tensor& dh) {
  const ModelConfig& c = model_.config();
  const GdnWeights& W = model_.weights().layers[layer].gdn;
  const int64_t T = p.tokens, Hk = c.linear_num_key_heads, dk = c.linear_key_head_dim;
  const int64_t Hv = c.linear_num_value_heads, dv = c.linear_value_head_dim, C = c.gdn_conv_dim();
  KILN_ASSIGN_OR_RETURN(Tensor dnormed, scratch({T, Hv * dv}));
  KILN_RETURN_IF_ERROR(
      projections_backward(tr, layer, {{LoraTarget::kOutProj, W.out_proj, dx}}, tr.normed, dnormed, false));
  KILN_ASSIGN_OR_RETURN(Tensor dcore, alloc({T, Hv, dv}));
  KILN_ASSIGN_OR_RETURN(Tensor dz, alloc({T, Hv * dv}));
  NormBackwardArgs gn;
  gn.kind = NormKind::kGated;
  gn.x = tr.core.reshape({T * Hv, dv});
  gn.weight = W.norm;
  gn.gate = tr.z.reshape({T * Hv, dv});
  gn.dout = dnormed.reshape({T * Hv, dv});
  gn.dx = dcore.reshape({T * Hv, dv});
  gn.dgate = dz.reshape({T * Hv, dv});
  gn.eps = static_cast<float>(c.rms_norm_eps);
  KILN_RETURN_IF_ERROR(train().norm_backward(gn));
  KILN_ASSIGN_OR_RETURN(Tensor dconv, alloc({T, C}));
  // da and db side by side, as in_proj_a and in_proj_b lie in the weight arena: one dX GEMM for both.
  KILN_ASSIGN_OR_RETURN(Tensor dab, alloc({T, 2 * Hv}));
  const Tensor da = dab.as_strided({T, Hv}, {2 * Hv, 1}), db = dab.as_strided({T, Hv}, {2 * Hv, 1}, Hv);
  auto heads = [&](const Tensor& t, int64_t h, int64_t d, int64_t off) {
    return t.as_strided({T, h, d}, {C, d, 1}, off);
  };
  GdnBackwardArgs g;
  g.chunk = opts_.gdn_chunk;
  g.q = heads(tr.conv, Hk, dk, 0);
  g.k = heads(tr.conv, Hk, dk, Hk * dk);
  g.v = heads(tr.conv, Hv, dv, 2 * Hk * dk);
  g.a = tr.a;
  g.b = tr.b;
  g.a_log = W.a_log;
  g.dt_bias = W.dt_bias;
  g.dout = dcore;
  g.dq = heads(dconv, Hk, dk, 0);
  g.dk = heads(dconv, Hk, dk, Hk * dk);
  g.dv = heads(dconv, Hv, dv, 2 * Hk * dk);
  g.da = da;
  g.db = db;
  g.layout = &p.layout;
  g.kept = tr.gdn_kept;  // the traced forward ran from zeroed slots (run_layer)
  // As the attention backward: a bf16 checkpoint's products may round (one tf32 pass).
  if (W.in_proj_qkv.dtype() == DType::kBF16) g.compute = DType::kBF16;
  KILN_RETURN_IF_ERROR(train().gdn_backward(g));
  KILN_ASSIGN_OR_RETURN(Tensor dmixed, alloc({T, C}));
  KILN_RETURN_IF_ERROR(train().conv_backward({tr.mixed, W.conv, dconv, dmixed, &p.layout}));
  if (const Tensor w_ab = stacked_rows(W.in_proj_a, W.in_proj_b); w_ab.defined()) {
    return projections_backward(tr, layer,
                                {{LoraTarget::kInProjQkv, W.in_proj_qkv, dmixed},
                                 {LoraTarget::kInProjZ, W.in_proj_z, dz},
                                 {std::nullopt, w_ab, dab}},
                                tr.h_in, dh, false);
  }
  return projections_backward(tr, layer,
                              {{LoraTarget::kInProjQkv, W.in_proj_qkv, dmixed},
                               {LoraTarget::kInProjZ, W.in_proj_z, dz},
                               {std::nullopt, W.in_proj_a, da},
                               {std::nullopt, W.in_proj_b, db}},
                              tr.h_in, dh, false);
}

// dx enters as the gradient of the layer's output and leaves as that of its input x_in.
Status TrainerImpl::layer_backward(Pass& p, int64_t layer, const LayerTrace& tr, const Tensor& x_in,
                                   const Tensor& dx) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[layer];
  const int64_t T = p.tokens, H = c.hidden_size, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  // MLP: x_out = x_mid + down(silu(gate(h)) * up(h)), h = rms(x_mid).
  KILN_ASSIGN_OR_RETURN(Tensor dact, scratch({T, I}));
  KILN_RETURN_IF_ERROR(
      projections_backward(tr, layer, {{LoraTarget::kDownProj, L.down_proj, dx}}, tr.act, dact, false));
  KILN_ASSIGN_OR_RETURN(Tensor dgate, scratch({T, I}));
  KILN_ASSIGN_OR_RETURN(Tensor dup, scratch({T, I}));
  KILN_RETURN_IF_ERROR(train().silu_mul_backward({tr.gate_raw, tr.up, dact, dgate, dup}));
  KILN_ASSIGN_OR_RETURN(Tensor dh, scratch({T, H}));
  KILN_RETURN_IF_ERROR(projections_backward(
      tr, layer, {{LoraTarget::kGateProj, L.gate_proj, dgate}, {LoraTarget::kUpProj, L.up_proj, dup}}, tr.h_post,
      dh, false));
  NormBackwardArgs post;
  post.x = tr.x_mid, post.weight = L.post_norm, post.dout = dh, post.dx = dx, post.accumulate = true, post.eps = eps;
  KILN_RETURN_IF_ERROR(train().norm_backward(post));
  // Mixer: x_mid = x_in + mixer(rms(x_in)).
  if (L.kind == LayerKind::kFullAttention) KILN_RETURN_IF_ERROR(attention_backward(p, layer, tr, dx, dh));
  else KILN_RETURN_IF_ERROR(gdn_backward(p, layer, tr, dx, dh));
  NormBackwardArgs in;
  in.x = x_in, in.weight = L.input_norm, in.dout = dh, in.dx = dx, in.accumulate = true, in.eps = eps;
  return train().norm_backward(in);
}

Status TrainerImpl::backward(const std::vector<std::vector<float>>& coef) {
  if (!kept_) return failed_precondition("LoraTrainer::backward: no forward(seqs, ForwardPass::kTrain) to follow");
  Pass& p = *kept_;
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const int64_t T = p.tokens, every = std::max<int64_t>(opts_.checkpoint_every, 1);
  const int64_t traced = static_cast<int64_t>(p.traced.size());
  if (coef.size() != p.offsets.size())
    return invalid_argument("LoraTrainer::backward: " + std::to_string(coef.size()) + " coefficient rows for " +
                            std::to_string(p.offsets.size()) + " sequences");
  std::vector<float> flat(static_cast<size_t>(T), 0.f);
  for (size_t s = 0; s < coef.size(); ++s) {
    const int64_t n = (s + 1 < p.offsets.size() ? p.offsets[s + 1] : T) - p.offsets[s];
    if (static_cast<int64_t>(coef[s].size()) != n)
      return invalid_argument("LoraTrainer::backward: sequence " + std::to_string(s) + " has " +
                              std::to_string(coef[s].size()) + " coefficients for " + std::to_string(n) + " tokens");
    for (int64_t t = 1; t < n; ++t)  // a row's first token: nothing predicts it, its coefficient is ignored
      if (!p.row_start[static_cast<size_t>(p.offsets[s] + t)]) flat[p.offsets[s] + t - 1] = coef[s][t];
  }
  KILN_ASSIGN_OR_RETURN(Tensor dev_coef, storage().upload(Tensor::from_values(flat, {T})));
  KILN_ASSIGN_OR_RETURN(Tensor dnormed, scratch({T, c.hidden_size}));
  KILN_RETURN_IF_ERROR(train().token_logprobs_backward({p.normed, w.lm_head, p.targets, p.lse, dev_coef, dnormed}));
  KILN_ASSIGN_OR_RETURN(Tensor dx, scratch({T, c.hidden_size}));
  NormBackwardArgs fin;
  fin.x = p.x_final, fin.weight = w.final_norm, fin.dout = dnormed, fin.dx = dx;
  fin.eps = static_cast<float>(c.rms_norm_eps);
  KILN_RETURN_IF_ERROR(train().norm_backward(fin));

  for (int64_t seg = static_cast<int64_t>(p.checkpoints.size()) - 1; seg >= 0; --seg) {
    const int64_t begin = traced + seg * every, end = std::min(begin + every, c.num_layers);
    // The input of every layer of the segment, recomputed from its checkpoint.
    std::vector<Tensor> inputs{p.checkpoints[seg]};
    for (int64_t i = begin; i + 1 < end; ++i) {
      KILN_ASSIGN_OR_RETURN(Tensor next, run_copy(p, i, inputs.back(), nullptr));
      inputs.push_back(next);
    }
    for (int64_t i = end - 1; i >= begin; --i) {
      const Tensor& x_in = inputs[i - begin];
      LayerTrace tr;
      KILN_RETURN_IF_ERROR(run_copy(p, i, x_in, &tr).status());
      KILN_RETURN_IF_ERROR(layer_backward(p, i, tr, x_in, dx));
    }
  }
  for (int64_t i = traced - 1; i >= 0; --i) {
    KILN_RETURN_IF_ERROR(layer_backward(p, i, p.traced[i].trace, p.traced[i].input, dx));
    p.traced[i] = {};  // its memory back to the pool for the layers below
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<LoraTrainer>> LoraTrainer::create(Qwen35Model& model, LoraAdapter& adapter, TrainerOptions opts) {
  if (adapter.num_layers() != model.config().num_layers)
    return invalid_argument("LoraTrainer: the adapter has " + std::to_string(adapter.num_layers()) +
                            " layers, the model " + std::to_string(model.config().num_layers));
  if (opts.checkpoint_every < 1)
    return invalid_argument("LoraTrainer: checkpoint_every is " + std::to_string(opts.checkpoint_every) +
                            ", it must be at least 1");
  if (!(opts.trace_memory_fraction >= 0 && opts.trace_memory_fraction <= 1))
    return invalid_argument("LoraTrainer: trace_memory_fraction is " + std::to_string(opts.trace_memory_fraction) +
                            ", it must be in [0, 1]");
  if (opts.trace_budget_bytes && *opts.trace_budget_bytes < 0)
    return invalid_argument("LoraTrainer: trace_budget_bytes is " + std::to_string(*opts.trace_budget_bytes) +
                            ", it must be at least 0");
  if (opts.gdn_chunk < 1)
    return invalid_argument("LoraTrainer: gdn_chunk is " + std::to_string(opts.gdn_chunk) + ", it must be at least 1");
  KILN_ASSIGN_OR_RETURN(LoraAdapter grads, LoraAdapter::zeros_like(adapter, model.backend().storage()));
  int64_t budget = 0;
  if (opts.trace_budget_bytes) {
    budget = *opts.trace_budget_bytes;
  } else if (const MemoryUsage m = model.backend().memory_usage(); m.used_bytes >= 0 && m.total_bytes > m.used_bytes) {
    budget = static_cast<int64_t>(opts.trace_memory_fraction * static_cast<double>(m.total_bytes - m.used_bytes));
  }
  auto trainer = std::make_unique<TrainerImpl>(model, adapter, std::move(grads), opts, budget);
  KILN_RETURN_IF_ERROR(trainer->stack_group_grads());
  return std::unique_ptr<LoraTrainer>(std::move(trainer));
}

}  // namespace kiln
