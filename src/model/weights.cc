#include "model/weights.h"

#include <map>

namespace kiln {

std::vector<TensorSpec> expected_tensors(const ModelConfig& c, bool with_lm_head) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  std::vector<TensorSpec> v;
  v.push_back({"embed_tokens.weight", {c.vocab_size, H}, InitKind::kEmbedding, false});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    v.push_back({p + "input_layernorm.weight", {H}, InitKind::kNormOffset, true});
    if (c.layer_types[i] == LayerKind::kFullAttention) {
      const std::string a = p + "self_attn.";
      v.push_back({a + "q_proj.weight", {c.q_proj_rows(), H}, InitKind::kMatrix, false});
      v.push_back({a + "k_proj.weight", {c.num_kv_heads * c.head_dim, H}, InitKind::kMatrix, false});
      v.push_back({a + "v_proj.weight", {c.num_kv_heads * c.head_dim, H}, InitKind::kMatrix, false});
      v.push_back({a + "o_proj.weight", {H, c.num_heads * c.head_dim}, InitKind::kMatrix, false});
      v.push_back({a + "q_norm.weight", {c.head_dim}, InitKind::kNormOffset, true});
      v.push_back({a + "k_norm.weight", {c.head_dim}, InitKind::kNormOffset, true});
    } else {
      const std::string g = p + "linear_attn.";
      const int64_t Hv = c.linear_num_value_heads;
      v.push_back({g + "in_proj_qkv.weight", {c.gdn_conv_dim(), H}, InitKind::kMatrix, false});
      v.push_back({g + "in_proj_z.weight", {c.gdn_value_dim(), H}, InitKind::kMatrix, false});
      v.push_back({g + "in_proj_b.weight", {Hv, H}, InitKind::kMatrix, false});
      v.push_back({g + "in_proj_a.weight", {Hv, H}, InitKind::kMatrix, false});
      v.push_back({g + "conv1d.weight", {c.gdn_conv_dim(), 1, c.linear_conv_kernel_dim}, InitKind::kConv, true});
      v.push_back({g + "dt_bias", {Hv}, InitKind::kDtBias, true});
      v.push_back({g + "A_log", {Hv}, InitKind::kALog, true});
      v.push_back({g + "norm.weight", {c.linear_value_head_dim}, InitKind::kGatedNormWeight, true});
      v.push_back({g + "out_proj.weight", {H, c.gdn_value_dim()}, InitKind::kMatrix, false});
    }
    v.push_back({p + "post_attention_layernorm.weight", {H}, InitKind::kNormOffset, true});
    v.push_back({p + "mlp.gate_proj.weight", {I, H}, InitKind::kMatrix, false});
    v.push_back({p + "mlp.up_proj.weight", {I, H}, InitKind::kMatrix, false});
    v.push_back({p + "mlp.down_proj.weight", {H, I}, InitKind::kMatrix, false});
  }
  v.push_back({"norm.weight", {H}, InitKind::kNormOffset, true});
  if (with_lm_head) v.push_back({"lm_head.weight", {c.vocab_size, H}, InitKind::kMatrix, false});
  return v;
}

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

}  // namespace

bool is_unused_tensor(const std::string& name) {
  return starts_with(name, "model.visual.") || starts_with(name, "visual.") || starts_with(name, "mtp.") ||
         starts_with(name, "model.mtp.");
}

std::vector<const Tensor*> ModelWeights::tensors() const {
  std::vector<const Tensor*> v = {&embed, &final_norm};
  if (!tied) v.push_back(&lm_head);
  for (const LayerWeights& l : layers)
    for (const Tensor* t : {&l.input_norm, &l.post_norm, &l.gate_proj, &l.up_proj, &l.down_proj, &l.attn.q_proj,
                            &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj, &l.attn.q_norm, &l.attn.k_norm,
                            &l.gdn.in_proj_qkv, &l.gdn.in_proj_z, &l.gdn.in_proj_a, &l.gdn.in_proj_b, &l.gdn.conv,
                            &l.gdn.a_log, &l.gdn.dt_bias, &l.gdn.norm, &l.gdn.out_proj})
      if (t->defined()) v.push_back(t);
  return v;
}

Result<ModelWeights> load_weights(const ModelConfig& c, const Checkpoint& ckpt, StorageFacet& storage) {
  std::string prefix = "model.";
  for (const auto& [name, e] : ckpt.tensors())
    if (starts_with(name, "model.language_model.")) {
      prefix = "model.language_model.";
      break;
    }
  const bool has_head = ckpt.find("lm_head.weight") != nullptr;
  const auto specs = expected_tensors(c, has_head);

  // 1. Validate everything before touching the device.
  std::map<std::string, const TensorSpec*> by_full_name;
  for (const auto& s : specs) by_full_name[s.name == "lm_head.weight" ? s.name : prefix + s.name] = &s;
  for (const auto& [full, spec] : by_full_name) {
    const TensorEntry* e = ckpt.find(full);
    if (e == nullptr) return not_found("checkpoint is missing tensor '" + full + "' (expected shape " + spec->shape.to_string() + ")");
    if (!(e->tensor.shape() == spec->shape))
      return invalid_argument("tensor '" + full + "' in " + e->file + " has shape " + e->tensor.shape().to_string() +
                              ", expected " + spec->shape.to_string());
    if (!is_float(e->tensor.dtype()))
      return invalid_argument("tensor '" + full + "' in " + e->file + " has dtype " +
                              std::string(dtype_name(e->tensor.dtype())) + ", expected f32, bf16 or f16");
  }
  for (const auto& [name, e] : ckpt.tensors())
    if (!by_full_name.count(name) && !is_unused_tensor(name))
      return invalid_argument("unexpected tensor '" + name + "' in " + e.file + " (not part of the Qwen3.5 text model)");

  // 2. Load: projections stay in their checkpoint dtype; small parameters become f32. Where the
  //    backend keeps a weight arena, one block holds them all, each at a 256-byte boundary.
  ModelWeights w;
  auto placed_bytes = [](const Tensor& src, const TensorSpec& spec) {
    const size_t bytes = spec.keep_f32 ? static_cast<size_t>(src.numel()) * sizeof(float) : src.nbytes();
    return (bytes + 255) / 256 * 256;
  };
  size_t total = 0;
  for (const auto& [full, spec] : by_full_name) total += placed_bytes(ckpt.find(full)->tensor, *spec);
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Storage> arena, storage.weight_arena(total));
  if (arena) w.arena_bytes = total;
  size_t offset = 0;
  auto place = [&](const Tensor& host, size_t bytes) -> Result<Tensor> {
    if (!arena) return storage.upload(host);
    if (offset + bytes > arena->bytes())
      return internal_error("weight arena of " + std::to_string(arena->bytes()) + " bytes is full at " + host.describe());
    Tensor dst(arena, host.dtype(), host.shape(), offset);
    offset += bytes;
    KILN_RETURN_IF_ERROR(storage.copy_from_host(host, dst));
    return dst;
  };
  auto get = [&](const std::string& name) -> Result<Tensor> {
    const std::string full = name == "lm_head.weight" ? name : prefix + name;
    const TensorSpec* spec = by_full_name.at(full);
    const Tensor& src = ckpt.find(full)->tensor;
    if (!spec->keep_f32) {
      w.matmul_bytes += name == "embed_tokens.weight" ? 0 : src.nbytes();
      return place(src, placed_bytes(src, *spec));
    }
    Tensor f = Tensor::empty(src.shape(), DType::kF32);
    to_f32(src.dtype(), src.raw(), f.data<float>(), static_cast<size_t>(src.numel()));
    return place(f, placed_bytes(src, *spec));
  };
#define KILN_LOAD(dst, name) KILN_ASSIGN_OR_RETURN(dst, get(name))
  KILN_LOAD(w.embed, "embed_tokens.weight");
  KILN_LOAD(w.final_norm, "norm.weight");
  w.tied = !has_head;
  if (has_head) {
    KILN_LOAD(w.lm_head, "lm_head.weight");
  } else {
    w.lm_head = w.embed;
    w.matmul_bytes += w.embed.nbytes();
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    LayerWeights L;
    L.kind = c.layer_types[i];
    KILN_LOAD(L.input_norm, p + "input_layernorm.weight");
    KILN_LOAD(L.post_norm, p + "post_attention_layernorm.weight");
    KILN_LOAD(L.gate_proj, p + "mlp.gate_proj.weight");
    KILN_LOAD(L.up_proj, p + "mlp.up_proj.weight");
    KILN_LOAD(L.down_proj, p + "mlp.down_proj.weight");
    if (L.kind == LayerKind::kFullAttention) {
      const std::string a = p + "self_attn.";
      KILN_LOAD(L.attn.q_proj, a + "q_proj.weight");
      KILN_LOAD(L.attn.k_proj, a + "k_proj.weight");
      KILN_LOAD(L.attn.v_proj, a + "v_proj.weight");
      KILN_LOAD(L.attn.o_proj, a + "o_proj.weight");
      KILN_LOAD(L.attn.q_norm, a + "q_norm.weight");
      KILN_LOAD(L.attn.k_norm, a + "k_norm.weight");
    } else {
      const std::string g = p + "linear_attn.";
      KILN_LOAD(L.gdn.in_proj_qkv, g + "in_proj_qkv.weight");
      KILN_LOAD(L.gdn.in_proj_z, g + "in_proj_z.weight");
      KILN_LOAD(L.gdn.in_proj_a, g + "in_proj_a.weight");
      KILN_LOAD(L.gdn.in_proj_b, g + "in_proj_b.weight");
      KILN_LOAD(Tensor conv, g + "conv1d.weight");
      L.gdn.conv = conv.reshape({c.gdn_conv_dim(), c.linear_conv_kernel_dim});
      KILN_LOAD(L.gdn.a_log, g + "A_log");
      KILN_LOAD(L.gdn.dt_bias, g + "dt_bias");
      KILN_LOAD(L.gdn.norm, g + "norm.weight");
      KILN_LOAD(L.gdn.out_proj, g + "out_proj.weight");
    }
    w.layers.push_back(std::move(L));
  }
#undef KILN_LOAD
  return w;
}

Tensor stacked_rows(const Tensor& first, const Tensor& second) {
  if (!first.defined() || !second.defined() || first.dtype() != second.dtype() || first.rank() != 2 ||
      second.rank() != 2 || first.dim(1) != second.dim(1) || !first.is_contiguous() || !second.is_contiguous() ||
      first.device().kind != second.device().kind ||
      static_cast<const char*>(first.raw()) + first.nbytes() != second.raw())
    return Tensor();
  return first.as_strided({first.dim(0) + second.dim(0), first.dim(1)}, {first.dim(1), 1});
}

}  // namespace kiln
