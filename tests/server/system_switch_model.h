// A tiny-chat checkpoint built by hand whose answer a system turn switches: without a system turn
// its greedy reply is " no no no ...", with one " yes yes yes ...". What the OPD proof distils
// (rollout_proof_http_test.cc). The weights are computed, not trained, so the model is the same on
// every machine and the teacher is far from the student in one known direction.
//
// The circuit, at hidden 64 (f32, untied LM head), over residual axes kConst, kMark and kAnswer
// (the other 61 axes keep the random checkpoint's embedding and LM head rows, as noise):
// - every embedding row carries kConstValue on kConst (Qwen3.5 projections have no bias: a
//   component every token shares is the only way to a query or a gate that is the same at every
//   position); only the token "system", which the chat template writes after <|im_start|> in a
//   system turn and nowhere else, carries kMarkValue on kMark;
// - every GDN out_proj and MLP down_proj is zero, so the residual before the attention layer is the
//   token's embedding;
// - in the attention layer (layer 3), head 0: the query reads kConst into a head dimension RoPE
//   leaves alone, the key reads kMark into that dimension (and kConst into the next, so unmarked
//   keys stay finite after k_norm), score margin about 20 nats; the value reads kMark, the output
//   gate reads kConst (sigmoid about 1), and o_proj writes kAttendValue onto kAnswer; every other
//   o_proj column is zero. Without a system turn no value is nonzero and the head adds exactly 0;
// - the LM head: " no" reads kConst a little more than " yes" (greedy " no", p(" yes") about 0.2),
//   " yes" also reads kAnswer (behind a system turn p(" yes") about 0.99); every other row keeps its
//   random noise (its logits about 20 nats below).
// A LoRA that writes onto kAnswer at every position (the same direction whatever the prompt)
// turns the student into the teacher.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/init.h"
#include "model/safetensors.h"
#include "tokenizer/qwen3_fixture.h"
#include "tokenizer/tokenizer.h"

namespace kiln::testing {

struct SystemSwitchTokens {
  int32_t mark = 0;  // "system"
  int32_t yes = 0;   // " yes": the answer behind a system turn
  int32_t no = 0;    // " no": the answer without one
};

// The ids the construction uses, each checked to be one token of the Qwen3 tokenizer.
inline SystemSwitchTokens system_switch_tokens() {
  auto tok = Tokenizer::load(qwen3_dir() + "/tokenizer.json");
  EXPECT_TRUE(tok.ok());
  if (!tok.ok()) return {};
  auto one = [&](const char* text) {
    const auto ids = tok->encode(text);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.empty() ? 0 : static_cast<int32_t>(ids[0]);
  };
  return {one("system"), one(" yes"), one(" no")};
}

// Replaces the checkpoint in `dir` (written by tiny_chat_server_config) with the construction above.
inline void write_system_switch_checkpoint(const std::string& dir) {
  constexpr int64_t kConst = 0, kMark = 1, kAnswer = 2;
  constexpr float kConstValue = 4.f, kMarkValue = 8.f, kAttendValue = 4.f;
  constexpr float kNoRead = 2.58f, kYesRead = 2.40f, kYesAnswerRead = 1.08f;
  constexpr int64_t kDim = 16;  // a head dimension past the rotary ones (tiny-chat rotates 8 of 32)

  ModelConfig mc = preset_config("tiny-chat").value();
  mc.tie_word_embeddings = false;
  ASSERT_GT(mc.head_dim, kDim + 1);
  ASSERT_LT(std::lround(mc.head_dim * mc.partial_rotary_factor), kDim);
  ASSERT_TRUE(write_random_checkpoint(mc, dir, {.dtype = DType::kF32, .quiet = true}).ok());
  const SystemSwitchTokens t = system_switch_tokens();
  ASSERT_FALSE(::testing::Test::HasFailure());

  std::vector<std::pair<std::string, Tensor>> out;
  {
    auto ck = Checkpoint::open(dir);
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    for (const auto& [name, e] : ck->tensors()) {
      Tensor copy = Tensor::empty(e.tensor.shape(), DType::kF32);
      std::copy_n(e.tensor.data<float>(), e.tensor.numel(), copy.data<float>());
      out.emplace_back(name, std::move(copy));
    }
  }
  auto find = [&](const std::string& name) -> Tensor& {
    for (auto& [n, tensor] : out)
      if (n == name) return tensor;
    ADD_FAILURE() << "no tensor " << name;
    return out.front().second;
  };
  auto zero = [](Tensor& x) { std::fill_n(x.data<float>(), x.numel(), 0.f); };
  const int64_t H = mc.hidden_size;
  auto row = [&](Tensor& m, int64_t r) { return m.data<float>() + r * m.shape()[m.shape().rank() - 1]; };

  Tensor& embed = find("model.embed_tokens.weight");
  Tensor& head = find("lm_head.weight");
  for (int64_t v = 0; v < mc.vocab_size; ++v) {
    float* e = row(embed, v);
    e[kConst] = kConstValue, e[kMark] = 0.f, e[kAnswer] = 0.f;
    float* h = row(head, v);
    h[kConst] = 0.f, h[kMark] = 0.f, h[kAnswer] = 0.f;
  }
  row(embed, t.mark)[kMark] = kMarkValue;
  for (int32_t id : {t.yes, t.no}) std::fill_n(row(head, id), H, 0.f);
  row(head, t.no)[kConst] = kNoRead;
  row(head, t.yes)[kConst] = kYesRead;
  row(head, t.yes)[kAnswer] = kYesAnswerRead;
  zero(find("model.norm.weight"));

  for (int64_t l = 0; l < mc.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    zero(find(p + "mlp.down_proj.weight"));
    if (mc.layer_types[l] == LayerKind::kLinearAttention) {
      zero(find(p + "linear_attn.out_proj.weight"));
      continue;
    }
    const std::string a = p + "self_attn.";
    zero(find(p + "input_layernorm.weight"));
    Tensor& q = find(a + "q_proj.weight");  // head 0: rows [0, hd) query, [hd, 2 hd) gate
    Tensor& k = find(a + "k_proj.weight");
    Tensor& v = find(a + "v_proj.weight");
    Tensor& o = find(a + "o_proj.weight");
    Tensor& qn = find(a + "q_norm.weight");
    Tensor& kn = find(a + "k_norm.weight");
    for (int64_t r = 0; r < 2 * mc.head_dim; ++r) std::fill_n(row(q, r), H, 0.f);
    for (int64_t r = 0; r < mc.head_dim; ++r) std::fill_n(row(k, r), H, 0.f), std::fill_n(row(v, r), H, 0.f);
    zero(qn), zero(kn), zero(o);
    row(q, kDim)[kConst] = 1.f;
    row(q, mc.head_dim)[kConst] = 2.f;  // the gate of dimension 0
    row(k, kDim)[kMark] = 1.f;
    row(k, kDim + 1)[kConst] = 1.f;
    qn.data<float>()[kDim] = 1.f;
    kn.data<float>()[kDim] = 1.f;
    row(v, 0)[kMark] = 1.f;
    // The marked token's normed kMark: sqrt(H) kMarkValue / |its embedding| (noise norm about 1).
    const float marked = std::sqrt(static_cast<float>(H)) * kMarkValue /
                         std::sqrt(kConstValue * kConstValue + kMarkValue * kMarkValue + 1.f);
    row(o, kAnswer)[0] = kAttendValue / marked;
  }
  const std::string file = dir + "/model.safetensors";
  ASSERT_TRUE(write_safetensors(file + ".built", out, {{"format", "pt"}}).ok());
  std::filesystem::rename(file + ".built", file);
}

}  // namespace kiln::testing
