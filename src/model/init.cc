#include "model/init.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/thread_pool.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace kiln {

namespace {

ModelConfig base(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads,
                 int64_t head_dim, int64_t k_heads, int64_t k_dim, int64_t v_heads, int64_t v_dim, double theta) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  for (int64_t i = 0; i < layers; ++i)
    c.layer_types.push_back((i + 1) % 4 == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention);
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.linear_num_key_heads = k_heads;
  c.linear_key_head_dim = k_dim;
  c.linear_num_value_heads = v_heads;
  c.linear_value_head_dim = v_dim;
  c.linear_conv_kernel_dim = 4;
  c.rope_theta = theta;
  c.partial_rotary_factor = 0.25;
  c.tie_word_embeddings = true;
  return c;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Fills out[0, n) for elements [first, first + n) of one tensor; deterministic per element block.
void draw(InitKind kind, const TensorSpec& spec, uint64_t seed, float* out, int64_t n) {
  uint64_t s = seed;
  auto uniform = [&] { return (static_cast<double>(splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  auto normal = [&] { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); };
  const int64_t fan_in = spec.shape[spec.shape.rank() - 1];
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (kind) {
      case InitKind::kMatrix: v = normal() / std::sqrt(static_cast<double>(fan_in)); break;
      case InitKind::kEmbedding: v = normal() / std::sqrt(static_cast<double>(fan_in)); break;
      case InitKind::kNormOffset: v = 0.1 * normal(); break;
      case InitKind::kGatedNormWeight: v = 1.0 + 0.1 * normal(); break;
      case InitKind::kALog: v = std::log(1.0 + 15.0 * uniform()); break;
      case InitKind::kDtBias: v = 0.5 * normal(); break;
      case InitKind::kConv: v = normal() / std::sqrt(static_cast<double>(fan_in)); break;
    }
    out[i] = static_cast<float>(v);
  }
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny", "tiny-chat", "small", "demo", "qwen3.5-4b"}; }

Result<ModelConfig> preset_config(const std::string& name) {
  if (name == "tiny") return base(512, 64, 128, 4, 4, 2, 32, 2, 16, 4, 16, 1e4);
  if (name == "small") return base(32768, 768, 2048, 12, 8, 2, 128, 4, 128, 8, 128, 1e7);
  if (name == "tiny-chat") {  // `tiny` with the Qwen3 tokenizer's vocabulary: server tests
    ModelConfig c = base(151936, 64, 128, 4, 4, 2, 32, 2, 16, 4, 16, 1e4);
    c.eos_token_ids = {151645, 151643};
    return c;
  }
  if (name == "demo") {  // what `kiln serve` runs without --model: the Qwen3 tokenizer's vocabulary
    ModelConfig c = base(151936, 512, 1536, 8, 8, 2, 64, 4, 64, 8, 64, 1e7);
    c.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
    return c;
  }
  if (name == "qwen3.5-4b") return base(248320, 2560, 9216, 32, 16, 4, 256, 16, 128, 32, 128, 1e7);
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("unknown preset '" + name + "' (known: " + known + ")");
}

Status write_random_checkpoint(const ModelConfig& config, const std::string& out_dir, const InitOptions& opts) {
  if (!is_float(opts.dtype)) return invalid_argument("--dtype must be bf16, f16 or f32");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return io_error(out_dir + ": cannot create directory: " + ec.message());
  const auto specs = expected_tensors(config, !config.tie_word_embeddings);
  std::vector<SafetensorsWriter::Spec> decl;
  uint64_t total_elems = 0;
  for (const auto& s : specs) {
    decl.push_back({s.name == "lm_head.weight" ? s.name : "model." + s.name, opts.dtype, s.shape});
    total_elems += static_cast<uint64_t>(s.shape.numel());
  }
  const std::string tmp = out_dir + "/model.safetensors.partial";
  KILN_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::create(tmp, decl, {{"format", "pt"}, {"kiln_seed", std::to_string(opts.seed)}}));

  constexpr int64_t kBlock = 1 << 20;  // elements drawn per task; the unit of determinism
  ThreadPool& pool = default_thread_pool();
  const int64_t batch_blocks = 4 * pool.size();
  std::vector<float> f32(static_cast<size_t>(kBlock * batch_blocks));
  std::vector<uint16_t> half(opts.dtype == DType::kF32 ? 0 : f32.size());
  uint64_t done = 0, next_report = 0;
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const TensorSpec& spec = specs[ti];
    const int64_t n = spec.shape.numel();
    const uint64_t tensor_seed = opts.seed * 0x9e3779b97f4a7c15ull ^ hash_name(spec.name);
    for (int64_t first = 0; first < n; first += kBlock * batch_blocks) {
      const int64_t count = std::min(n - first, kBlock * batch_blocks);
      const int64_t blocks = (count + kBlock - 1) / kBlock;
      pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1, int) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t start = b * kBlock, len = std::min(kBlock, count - start);
          draw(spec.init, spec, tensor_seed + static_cast<uint64_t>((first + start) / kBlock), f32.data() + start, len);
          if (opts.dtype == DType::kBF16) f32_to_bf16(f32.data() + start, half.data() + start, len);
          if (opts.dtype == DType::kF16) f32_to_f16(f32.data() + start, half.data() + start, len);
        }
      });
      if (opts.dtype == DType::kF32) KILN_RETURN_IF_ERROR(writer->write(f32.data(), count * 4));
      else KILN_RETURN_IF_ERROR(writer->write(half.data(), count * 2));
      done += static_cast<uint64_t>(count);
      if (!opts.quiet && done >= next_report) {
        std::fprintf(stderr, "model init: %5.1f%% (%llu / %llu parameters)\n", 100.0 * done / total_elems,
                     static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_elems));
        next_report = done + total_elems / 10;
      }
    }
  }
  KILN_RETURN_IF_ERROR(writer->finish());
  std::filesystem::rename(tmp, out_dir + "/model.safetensors", ec);
  if (ec) return io_error(out_dir + "/model.safetensors: rename failed: " + ec.message());
  std::ofstream cfg(out_dir + "/config.json");
  cfg << config.to_json().dump(2) << "\n";
  if (!cfg) return io_error(out_dir + "/config.json: write failed");
  return {};
}

}  // namespace kiln
