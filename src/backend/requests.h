// Typed descriptors of backend work. A support predicate is evaluated on the actual request;
// each descriptor is derived from the tensors of a call (describe(args)), so the question asked
// and the work done cannot drift apart. Each request lists its fields once (kFields), and one
// function, describe_request, formats any request from its table: a new field is a table line.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "backend/elementwise_ops.h"
#include "core/dtype.h"

namespace kiln {

enum class Phase : uint8_t { kPrefill, kDecode };
std::string_view phase_name(Phase p);

// The default text of a field's value: numbers in decimal, dtypes by name, text as it is.
struct PlainText {
  std::string operator()(int64_t v) const { return std::to_string(v); }
  std::string operator()(DType t) const { return std::string(dtype_name(t)); }
  std::string operator()(std::string_view v) const { return std::string(v); }
};

// An entry of a request's kFields: the text of the value `get` reads from the request (a member
// pointer, or a function of the request) as "name=value", or the value alone where the name is
// empty; a bool shows its name alone, when true. `print` gives the value's text. Where
// `skip_default`, the entry shows nothing while its value is a default request's.
template <class Get, class Print = PlainText>
constexpr auto field(std::string_view name, Get get, Print print = {}, bool skip_default = false) {
  return [=](const auto& r) -> std::string {
    const auto& v = std::invoke(get, r);
    if (skip_default && v == std::invoke(get, std::decay_t<decltype(r)>{})) return "";
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>) return v ? std::string(name) : "";
    else return name.empty() ? std::string(print(v)) : std::string(name) + "=" + std::string(print(v));
  };
}
template <class Get, class Print = PlainText>
constexpr auto field_unless_default(std::string_view name, Get get, Print print = {}) {
  return field(name, get, print, true);
}

// Every request's describe(): the texts of its kFields in order, separated by spaces; a plain
// string entry (the op's name) shows as it is.
template <class R>
std::string describe_request(const R& r) {
  std::string s;
  auto add = [&](const auto& entry) {
    std::string t;
    if constexpr (std::is_convertible_v<decltype(entry), std::string_view>) t = entry; else t = entry(r);
    if (!t.empty()) s += (s.empty() ? "" : " ") + t;
  };
  std::apply([&](const auto&... entries) { (add(entries), ...); }, R::kFields);
  return s;
}

// y[m, n] (+)= x[m, k] * w[n, k]^T: every projection of the model.
struct MatmulRequest {
  int64_t m = 0, n = 0, k = 0;
  DType x_dtype = DType::kF32, w_dtype = DType::kF32, out_dtype = DType::kF32;
  bool accumulate = false;  // add into the output instead of overwriting it
  static constexpr auto kFields = std::tuple{
      "matmul", field("m", &MatmulRequest::m), field("n", &MatmulRequest::n), field("k", &MatmulRequest::k),
      field("x", &MatmulRequest::x_dtype), field("w", &MatmulRequest::w_dtype),
      field("out", &MatmulRequest::out_dtype), field("accumulate", &MatmulRequest::accumulate)};
  std::string describe() const { return describe_request(*this); }
};

enum class NormKind : uint8_t {
  kOnePlus,  // y = x * rsqrt(mean(x^2) + eps) * (1 + w): the model's RMSNorm
  kPlain,    // y = x * rsqrt(mean(x^2) + eps) * w
  kGated,    // y = w * x * rsqrt(mean(x^2) + eps) * silu(z): the GDN output norm
};
std::string_view norm_kind_name(NormKind k);  // "rms_norm(1+w)", "rms_norm(w)", "gated_rms_norm"

struct NormRequest {
  NormKind kind = NormKind::kOnePlus;
  int64_t rows = 0, width = 0;
  DType dtype = DType::kF32;
  bool fused_residual = false;  // residual += x first, then normalise the residual
  DType out_dtype = DType::kF32;  // or bf16 / f16 where the backend says so (NormArgs::out)
  static constexpr auto kFields = std::tuple{
      field("", &NormRequest::kind, norm_kind_name), field("rows", &NormRequest::rows),
      field("width", &NormRequest::width), field("", &NormRequest::dtype),
      field("+residual", &NormRequest::fused_residual), field_unless_default("out", &NormRequest::out_dtype)};
  std::string describe() const { return describe_request(*this); }
};

struct RopeRequest {
  int64_t tokens = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  static constexpr auto kFields = std::tuple{
      "rope", field("tokens", &RopeRequest::tokens), field("heads", &RopeRequest::heads),
      field("head_dim", &RopeRequest::head_dim), field("rotary_dim", &RopeRequest::rotary_dim)};
  std::string describe() const { return describe_request(*this); }
};

// Writing new K/V rows into the paged cache through a slot mapping.
struct KvWriteRequest {
  int64_t tokens = 0, kv_heads = 0, head_dim = 0;
  int block_size = 0;
  DType kv_dtype = DType::kF32;
  static constexpr auto kFields = std::tuple{
      "kv_write", field("tokens", &KvWriteRequest::tokens), field("kv_heads", &KvWriteRequest::kv_heads),
      field("head_dim", &KvWriteRequest::head_dim), field("block", &KvWriteRequest::block_size),
      field("kv", &KvWriteRequest::kv_dtype)};
  std::string describe() const { return describe_request(*this); }
};

// Causal GQA attention of new query tokens over a paged K/V history that already holds them.
struct AttentionRequest {
  Phase phase = Phase::kPrefill;
  int64_t rows = 0, tokens = 0;  // sequences in the batch, query tokens in all of them
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_kv_len = 0;
  int block_size = 0;
  bool output_gate = false;  // out *= sigmoid(gate), fused
  DType dtype = DType::kF32, kv_dtype = DType::kF32;
  DType compute = DType::kF32;  // kBF16: products may round Q, K, V and P to bf16 (AttentionArgs)
  static constexpr auto kFields = std::tuple{
      "attention", field("", &AttentionRequest::phase, phase_name), field("rows", &AttentionRequest::rows),
      field("tokens", &AttentionRequest::tokens), field("q_heads", &AttentionRequest::q_heads),
      field("kv_heads", &AttentionRequest::kv_heads), field("head_dim", &AttentionRequest::head_dim),
      field("max_kv", &AttentionRequest::max_kv_len), field("block", &AttentionRequest::block_size),
      field("gated", &AttentionRequest::output_gate), field("", &AttentionRequest::dtype),
      field("kv", &AttentionRequest::kv_dtype), field_unless_default("compute", &AttentionRequest::compute)};
  std::string describe() const { return describe_request(*this); }
};

// Depthwise causal conv1d (+ silu) continuing from a per-sequence state of the last K-1 inputs.
struct ConvRequest {
  Phase phase = Phase::kPrefill;
  int64_t rows = 0, tokens = 0, channels = 0, kernel = 0;
  static constexpr auto kFields = std::tuple{
      "causal_conv1d", field("", &ConvRequest::phase, phase_name), field("rows", &ConvRequest::rows),
      field("tokens", &ConvRequest::tokens), field("channels", &ConvRequest::channels),
      field("kernel", &ConvRequest::kernel)};
  std::string describe() const { return describe_request(*this); }
};

enum class GdnForm : uint8_t { kChunked, kRecurrent };

// The gated delta rule (l2 norm of q and k, gates, state recurrence) continuing from a state.
struct GdnRequest {
  Phase phase = Phase::kPrefill;
  GdnForm form = GdnForm::kChunked;
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0;
  int chunk = 64;
  DType state_dtype = DType::kF32;
  DType compute = DType::kF32;  // kBF16: products may round their operands (GdnArgs)
  static constexpr auto kFields = std::tuple{
      "gdn", field("", &GdnRequest::phase, phase_name),
      field("", [](const auto& r) {
        return r.form == GdnForm::kRecurrent ? "recurrent" : "chunked(" + std::to_string(r.chunk) + ")";
      }),
      field("rows", &GdnRequest::rows), field("tokens", &GdnRequest::tokens), field("k_heads", &GdnRequest::k_heads),
      field("v_heads", &GdnRequest::v_heads), field("dk", &GdnRequest::dk), field("dv", &GdnRequest::dv),
      field("state", &GdnRequest::state_dtype), field_unless_default("compute", &GdnRequest::compute)};
  std::string describe() const { return describe_request(*this); }
};

// The fused GDN decode step: per row and value head, the conv update of the qkv projection, l2
// norm of q and k, gates, the recurrence and the gated output norm, in one call (docs/model.md,
// "Decode: the fused step"). Optional: a backend without it declines, and the model runs the conv,
// the delta rule and the gated norm as separate calls.
struct GdnDecodeRequest {
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0, conv_kernel = 0;
  DType state_dtype = DType::kF32;
  static constexpr auto kFields = std::tuple{
      "gdn fused_decode", field("rows", &GdnDecodeRequest::rows), field("tokens", &GdnDecodeRequest::tokens),
      field("k_heads", &GdnDecodeRequest::k_heads), field("v_heads", &GdnDecodeRequest::v_heads),
      field("dk", &GdnDecodeRequest::dk), field("dv", &GdnDecodeRequest::dv),
      field("conv_kernel", &GdnDecodeRequest::conv_kernel), field("state", &GdnDecodeRequest::state_dtype)};
  std::string describe() const { return describe_request(*this); }
};

struct ElementwiseRequest {
  ElementwiseOp op = ElementwiseOp::kAdd;
  int64_t rows = 0, width = 0;
  DType dtype = DType::kF32;  // the table's dtype for kEmbed
  DType out_dtype = DType::kF32;
  static constexpr auto kFields = std::tuple{
      field("", &ElementwiseRequest::op,
            [](ElementwiseOp op) { return binary_op_info(op) != nullptr ? binary_op_info(op)->name : "embed"; }),
      field("rows", &ElementwiseRequest::rows), field("width", &ElementwiseRequest::width),
      field("", &ElementwiseRequest::dtype), field_unless_default("out", &ElementwiseRequest::out_dtype)};
  std::string describe() const { return describe_request(*this); }
};

struct SampleRequest {
  int64_t rows = 0, vocab = 0;
  bool greedy = true;
  bool constrained = false;  // some row has a token mask or a logit bias
  static constexpr auto kFields = std::tuple{
      field("", [](const auto& r) { return r.greedy ? "argmax" : "sample"; }), field("rows", &SampleRequest::rows),
      field("vocab", &SampleRequest::vocab), field("constrained", &SampleRequest::constrained)};
  std::string describe() const { return describe_request(*this); }
};

}  // namespace kiln
