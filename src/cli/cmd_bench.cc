// `kiln bench`: prefill and decode throughput of one backend on one checkpoint, each figure
// printed (JSON) next to its roofline measured in the same run: copy bandwidth for decode
// (bytes of weights per token / bandwidth), the backend's own large-GEMM rate for prefill.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <numeric>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "cli/bench_engine.h"
#include "cli/bench_kv_effect.h"
#include "cli/bench_peer.h"
#include "cli/bench_roofline.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "grammar/grammar_cache.h"
#include "model/qwen35.h"
#include "tokenizer/tokenizer.h"
#ifdef KILN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Host copy bandwidth, counting bytes read plus bytes written, over buffers far larger than cache.
double measure_copy_bandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  ThreadPool& pool = default_thread_pool();
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    auto t = Clock::now();
    pool.parallel_for(static_cast<int64_t>(bytes >> 20), 1, [&](int64_t m0, int64_t m1, int) {
      std::memcpy(b.data() + (m0 << 20), a.data() + (m0 << 20), static_cast<size_t>((m1 - m0) << 20));
    });
    if (rep > 0) times.push_back(seconds_since(t));  // the first pass faults pages in
  }
  return 2.0 * static_cast<double>(bytes) / median(times);
}

// A device's copy bandwidth through its storage facet (device-to-device copies timed on the host
// to their synchronisation, four a pass so that the submission's latency weighs little),
// counting bytes read plus bytes written: for device backends without a timer of their own
// (Vulkan).
Result<double> measure_device_copy_bandwidth(Backend& be, size_t bytes) {
  StorageFacet& st = be.storage();
  const Shape shape{static_cast<int64_t>(bytes / 4)};
  KILN_ASSIGN_OR_RETURN(Tensor a, st.allocate(shape, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor b, st.allocate(shape, DType::kF32));
  constexpr int kCopies = 4;
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    KILN_RETURN_IF_ERROR(st.synchronize());
    auto t = Clock::now();
    for (int i = 0; i < kCopies; ++i) KILN_RETURN_IF_ERROR(i % 2 ? st.copy(b, a) : st.copy(a, b));
    KILN_RETURN_IF_ERROR(st.synchronize());
    if (rep > 0) times.push_back(seconds_since(t) / kCopies);
  }
  return 2.0 * static_cast<double>(a.nbytes()) / median(times);
}

// The backend's large GEMM rate through its own matmul facet, with weights of `w_dtype`, on
// non-zero data (zeros can run faster than real data on some devices).
Result<double> measure_matmul_rate(Backend& be, DType w_dtype, int64_t M, int64_t N, int64_t K) {
  auto filled = [&](int64_t rows, int64_t cols, DType dt) -> Result<Tensor> {
    Tensor h = Tensor::empty({rows, cols}, DType::kF32);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = static_cast<float>((i * 7919) % 17) / 17.f - 0.5f;
    if (dt == DType::kF32) return be.storage().upload(h);
    Tensor c = Tensor::empty({rows, cols}, dt);
    if (dt == DType::kBF16) f32_to_bf16(h.data<float>(), c.data<uint16_t>(), static_cast<size_t>(h.numel()));
    else f32_to_f16(h.data<float>(), c.data<uint16_t>(), static_cast<size_t>(h.numel()));
    return be.storage().upload(c);
  };
  KILN_ASSIGN_OR_RETURN(Tensor x, filled(M, K, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor w, filled(N, K, w_dtype));
  KILN_ASSIGN_OR_RETURN(Tensor y, be.storage().allocate({M, N}, DType::kF32));
  std::vector<double> times;
  for (int rep = 0; rep < 4; ++rep) {
    auto t = Clock::now();
    KILN_RETURN_IF_ERROR(be.linear().matmul({x, w, y}));
    KILN_RETURN_IF_ERROR(be.storage().synchronize());
    if (rep > 0) times.push_back(seconds_since(t));
  }
  return 2.0 * M * N * K / median(times);
}

struct BenchOpts {
  std::string model, backend = "cpu";
  int64_t prompt_tokens = 256, decode_tokens = 32;
  int repeats = 3;
  // The engine-level sweep (each empty or 0: skipped).
  std::vector<int64_t> batches, prefill_tokens;
  int64_t context = 1024, ttft_tokens = 0;
  int64_t prefill_tile = -1;  // ForwardOptions::prefill_tile of every prefill
  bool host_sampling = false;
  bool eager = false;
  float temperature = 0.f, top_p = 1.f;
  int64_t adapters = 0, adapter_rank = 16;
  bool kv_fp8 = false;  // memory.kv_cache_fp8: K/V in e4m3, and its effect on the logits measured
  std::string peer_json;
  std::string json_schema, tokenizer;  // decode sweep under a JSON-schema constraint
};

// The device pool's peak over the whole run, kept across the per-prefill restarts of the peak
// (CUDA only; 0 elsewhere).
uint64_t pool_peak_so_far(Backend& be, uint64_t peak) {
#ifdef KILN_HAVE_CUDA
  if (auto st = cuda_backend_stats(be); st.ok()) return std::max(peak, st->pool_peak_in_use_bytes);
#endif
  return peak;
}

// The tile `model` prefills `prompt` in as one row (0: one pass).
Result<int64_t> prefill_tile_of(const Qwen35Model& model, std::span<const int32_t> prompt) {
  SequenceState probe;
  const SequenceInput row{&probe, prompt};
  return model.prefill_tile({&row, 1});
}

// Prefill of one `tokens`-token prompt through the forward (last-token logits), median of
// `repeats`, next to its FLOP roofline at `rate` (measured) and at the spec-sheet peak; whether it
// ran tiled (model/tiled_prefill.h) and, on CUDA, the device memory its activations took at peak.
Result<nlohmann::json> bench_prefill(Qwen35Model& model, int64_t tokens, int repeats, double rate, bool device,
                                     uint64_t& run_peak) {
  const ModelConfig& c = model.config();
  KILN_ASSIGN_OR_RETURN(ModelState state, model.create_state({1, (tokens + 63) / 64}));
  std::vector<int32_t> prompt(static_cast<size_t>(tokens));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 29) % c.vocab_size);
  KILN_ASSIGN_OR_RETURN(const int64_t tile, prefill_tile_of(model, prompt));
  // The peak restarts here, after the weights and this prompt's K/V and GDN state are allocated,
  // so peak - in use is what the forward itself took: activations, logits, GEMM scratch.
  run_peak = pool_peak_so_far(model.backend(), run_peak);
  [[maybe_unused]] uint64_t in_use_before = 0;
#ifdef KILN_HAVE_CUDA
  if (auto st = cuda_backend_stats(model.backend()); st.ok()) {
    in_use_before = st->pool_in_use_bytes;
    KILN_RETURN_IF_ERROR(cuda_reset_peak_memory(model.backend()));
  }
#endif
  std::vector<double> s;
  for (int rep = 0; rep < repeats; ++rep) {
    KILN_ASSIGN_OR_RETURN(SequenceState seq, state.new_sequence());
    auto t = Clock::now();
    SequenceInput row{&seq, prompt};
    KILN_ASSIGN_OR_RETURN(Tensor logits, model.forward({&row, 1}, LogitsMode::kLast, state));  // host: synchronised
    s.push_back(seconds_since(t));
    state.release(seq);
  }
  const double time = median(s), flops = prefill_flops(c, model.weights(), tokens);
  nlohmann::json j = {{"tokens", tokens},
                      {"repeats", repeats},
                      {"seconds", time},
                      {"tokens_per_s", tokens / time},
                      {"flops", flops},
                      {"tflop_s", flops / time / 1e12},
                      {"roofline_tokens_per_s", tokens / (flops / rate)},
                      {"fraction_of_roofline", flops / time / rate},
                      {"tiled", tile > 0},
                      {"tile_tokens", tile}};
  if (device) {
    j["roofline_tokens_per_s_spec"] = tokens / (flops / kH200PeakBf16FlopPerS);
    j["fraction_of_spec_roofline"] = flops / time / kH200PeakBf16FlopPerS;
  }
#ifdef KILN_HAVE_CUDA
  if (auto st = cuda_backend_stats(model.backend()); st.ok()) {
    j["device_pool_in_use_before_bytes"] = in_use_before;
    j["device_pool_peak_bytes"] = st->pool_peak_in_use_bytes;
    j["activation_peak_bytes"] = st->pool_peak_in_use_bytes - in_use_before;
  }
#endif
  run_peak = pool_peak_so_far(model.backend(), run_peak);
  return j;
}

// The rooflines a run's figures stand next to: on the host its memcpy bandwidth and f32 matmul
// rate; on an accelerator the device's copy bandwidth and its GEMM rate in the checkpoint's weight
// dtype, on a problem large enough to fill it (docs/ARCHITECTURE.md).
struct Rooflines {
  double bandwidth = 0, matmul_rate = 0;  // bytes/s (read + written), flop/s
  std::string bandwidth_note, matmul_note;
};

Result<Rooflines> measure_rooflines(Backend& be, const Qwen35Model& model, bool device, const std::string& backend) {
  std::fprintf(stderr, "bench: measuring copy bandwidth and matmul rate...\n");
  Rooflines r;
  // 256 MiB: several times any host's last-level cache, and a quarter of the page faulting a
  // GiB took (the first pass faults the pages in; a bench of a tiny model spent seconds there).
  r.bandwidth_note = "bytes read + bytes written per second, 256 MiB memcpy on all threads";
  r.matmul_note = "the backend's own f32 matmul, 512x2048x2048";
  DType rate_dtype = DType::kF32;
  int64_t rate_m = 512, rate_nk = 2048;
  if (!device) {
    r.bandwidth = measure_copy_bandwidth(size_t{1} << 28);
  } else {
    Result<double> bandwidth = unsupported("no device copy measured");
#ifdef KILN_HAVE_CUDA
    if (be.identity().name == "cuda") bandwidth = cuda_device_copy_bandwidth(be, size_t{1} << 30);
#endif
    if (be.identity().name != "cuda") bandwidth = measure_device_copy_bandwidth(be, size_t{1} << 30);
    KILN_ASSIGN_OR_RETURN(r.bandwidth, std::move(bandwidth));
    r.bandwidth_note = "bytes read + bytes written per second, 1 GiB device-to-device copy";
    rate_dtype = model.weights().embed.dtype();
    rate_m = rate_nk = 4096;
    r.matmul_note = "the backend's own matmul, 4096x4096x4096, " + std::string(dtype_name(rate_dtype)) + " weights";
  }
  if (r.bandwidth <= 0) return unsupported("bench: no copy-bandwidth measurement for backend " + backend);
  KILN_ASSIGN_OR_RETURN(r.matmul_rate, measure_matmul_rate(be, rate_dtype, rate_m, rate_nk, rate_nk));
  return r;
}

// Kernel launches + cuBLASLt matmuls so far (CUDA only; null elsewhere).
std::optional<uint64_t> launches_now([[maybe_unused]] Backend& be) {
#ifdef KILN_HAVE_CUDA
  if (auto st = cuda_backend_stats(be); st.ok()) return st->launches;
#endif
  return std::nullopt;
}

// One row through the forward step by step: a --prompt-tokens prefill then --decode-tokens
// greedy steps, median of the repeats; the "prefill" and "decode" entries of the report.
Result<nlohmann::json> bench_one_row(Qwen35Model& model, const BenchOpts& o, const Rooflines& roof, bool device) {
  Backend& be = model.backend();
  const ModelConfig& c = model.config();
  const int64_t ctx = o.prompt_tokens + o.decode_tokens;
  KILN_ASSIGN_OR_RETURN(ModelState state, model.create_state({1, (ctx + 63) / 64}));
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % c.vocab_size);

  std::vector<double> prefill_s, decode_s;
  KILN_ASSIGN_OR_RETURN(const int64_t prefill_tile, prefill_tile_of(model, prompt));
  // The argmax runs where the logits are; on a device only the id crosses to the host.
  Tensor ids = Tensor::empty({1}, DType::kI32), dev_ids = ids;
  if (device) {
    KILN_ASSIGN_OR_RETURN(dev_ids, be.storage().allocate({1}, DType::kI32));
  }
  auto pick = [&](const Tensor& logits) -> Status {
    KILN_RETURN_IF_ERROR(be.sampling().argmax({logits, dev_ids}));
    return device ? be.storage().copy_to_host(dev_ids, ids) : Status();
  };
  uint64_t decode_launches = 0;
  bool launches_counted = false;
  for (int rep = 0; rep < o.repeats; ++rep) {
    KILN_ASSIGN_OR_RETURN(SequenceState seq, state.new_sequence());
    std::fprintf(stderr, "bench: repeat %d/%d: prefill %lld tokens, decode %lld tokens\n", rep + 1, o.repeats,
                 static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.decode_tokens));
    auto t = Clock::now();
    SequenceInput row{&seq, prompt};
    KILN_ASSIGN_OR_RETURN(Tensor logits, model.forward_on_device({&row, 1}, LogitsMode::kLast, state));
    KILN_RETURN_IF_ERROR(pick(logits));
    prefill_s.push_back(seconds_since(t));
    t = Clock::now();
    const std::optional<uint64_t> launches_before = launches_now(be);
    for (int64_t i = 0; i < o.decode_tokens; ++i) {
      int32_t tok = ids.data<int32_t>()[0];
      SequenceInput step{&seq, {&tok, 1}};
      KILN_ASSIGN_OR_RETURN(logits, model.forward_on_device({&step, 1}, LogitsMode::kLast, state));
      KILN_RETURN_IF_ERROR(pick(logits));
    }
    decode_s.push_back(seconds_since(t));
    if (auto after = launches_now(be); after && launches_before) {
      decode_launches += *after - *launches_before;
      launches_counted = true;
    }
    state.release(seq);
  }

  const double matmul_params = static_cast<double>(model.weights().matmul_bytes) /
                               static_cast<double>(dtype_size(model.weights().embed.dtype()));
  const double prefill_time = median(prefill_s), decode_time = median(decode_s);
  const double prefill_tps = o.prompt_tokens / prefill_time;
  const double prefill_flops = 2.0 * matmul_params * o.prompt_tokens / prefill_time;
  const double bytes_per_token = static_cast<double>(model.weights().matmul_bytes);
  const double decode_tps = o.decode_tokens / decode_time;
  const double roofline_tps = roof.bandwidth / bytes_per_token;
  return nlohmann::json{
      {"prefill", {{"tokens", o.prompt_tokens},
                   {"seconds", prefill_time},
                   {"tokens_per_s", prefill_tps},
                   {"matmul_gflop_s", prefill_flops / 1e9},
                   {"fraction_of_matmul_rate", prefill_flops / roof.matmul_rate},
                   {"tiled", prefill_tile > 0},
                   {"tile_tokens", prefill_tile}}},
      {"decode", {{"tokens", o.decode_tokens},
                  {"context", ctx},
                  {"seconds", decode_time},
                  {"tokens_per_s", decode_tps},
                  {"roofline_tokens_per_s", roofline_tps},
                  {"fraction_of_roofline", decode_tps / roofline_tps},
                  {"execution", "eager: the forward called step by step (decode_batches goes through the engine)"},
                  // Every kernel launch and cuBLASLt matmul of a decode step, the argmax included.
                  {"launches_per_token", launches_counted ? nlohmann::json(static_cast<double>(decode_launches) /
                                                                           static_cast<double>(o.decode_tokens * o.repeats))
                                                          : nlohmann::json(nullptr)}}},
      {"matmul_params", matmul_params},
      {"matmul_bytes_per_token", bytes_per_token}};
}

// The engine's options for the batch sweep and TTFT, from the command line.
EngineBenchOpts engine_opts(const BenchOpts& o) {
  EngineBenchOpts eo;
  eo.context = o.context;
  eo.decode_steps = o.decode_tokens;
  eo.device_sampling = !o.host_sampling;
  eo.decode_replay = !o.eager;
  eo.temperature = o.temperature;
  eo.top_p = o.top_p;
  eo.adapters = o.adapters;
  eo.adapter_rank = o.adapter_rank;
  return eo;
}

// The --json-schema grammar over the model's vocabulary (the tokenizer of --tokenizer, else of the
// model directory; null without the option), with what its compile took and what a repeat of the
// same schema takes (the server's GrammarCache hit).
struct BenchGrammar {
  std::shared_ptr<const grammar::MaskCache> cache;
  double compile_ms = 0, cached_ms = 0;
};
Result<BenchGrammar> bench_grammar(const BenchOpts& o, const std::string& model_dir, const ModelConfig& c) {
  if (o.json_schema.empty()) return BenchGrammar{};
  auto file = MappedFile::open(o.json_schema);
  if (!file.ok()) return file.status().with_context("--json-schema");
  const std::string schema((*file)->bytes_ptr(), (*file)->bytes());
  auto tok = Tokenizer::load(o.tokenizer.empty() ? model_dir : o.tokenizer);
  if (!tok.ok()) return tok.status().with_context("--tokenizer (the --json-schema constraint needs the model's tokenizer)");
  std::vector<int32_t> stops(c.eos_token_ids.begin(), c.eos_token_ids.end());
  KILN_ASSIGN_OR_RETURN(grammar::TokenVocabulary vocab,
                        grammar::TokenVocabulary::from_tokenizer(*tok, static_cast<size_t>(c.vocab_size), stops));
  grammar::GrammarCache cache(std::make_shared<const grammar::TokenVocabulary>(std::move(vocab)), 1);
  BenchGrammar out;
  const auto t0 = Clock::now();
  auto g = cache.get({grammar::GrammarKind::kJsonSchema, schema, {}});
  out.compile_ms = 1e3 * seconds_since(t0);
  if (!g.ok()) return g.status().with_context("--json-schema " + o.json_schema);
  const auto t1 = Clock::now();
  KILN_ASSIGN_OR_RETURN(out.cache, cache.get({grammar::GrammarKind::kJsonSchema, schema, {}}));
  out.cached_ms = 1e3 * seconds_since(t1);
  return out;
}

// Engine decode at each of --batches rows at --context, each point next to its bytes-per-step
// roofline.
nlohmann::json bench_decode_batches(Qwen35Model& model, const BenchOpts& o, double bandwidth, bool device,
                                    const BenchGrammar& constraint) {
  EngineBenchOpts eo = engine_opts(o);
  eo.grammar = constraint.cache;
  nlohmann::json sweep = nlohmann::json::array();
  for (int64_t b : o.batches) {
    std::fprintf(stderr, "bench: engine decode, batch %lld at context %lld\n", static_cast<long long>(b),
                 static_cast<long long>(o.context));
    auto r = bench_engine_decode(model, b, eo);
    if (!r.ok()) {
      sweep.push_back({{"batch", b}, {"error", r.status().to_string()}});
      continue;
    }
    // Bytes at the middle of the timed steps' contexts (rows that prefilled early are up to
    // prefill_cycles tokens longer: half of that on average).
    const int64_t mid = o.context + 2 + o.decode_tokens / 2 + r->value("prefill_cycles", int64_t{0}) / 2;
    const double bytes = decode_step_bytes(model.config(), model.weights(), model.kv_dtype(), b, mid) +
                         r->value("adapter_bytes_per_step", 0.0);
    const double tps = (*r)["tokens_per_s"].get<double>();
    (*r)["bytes_per_step"] = bytes;
    (*r)["roofline_tokens_per_s"] = b * bandwidth / bytes;
    (*r)["fraction_of_roofline"] = tps / (b * bandwidth / bytes);
    if (device) {
      (*r)["roofline_tokens_per_s_spec"] = b * kH200PeakBytesPerS / bytes;
      (*r)["fraction_of_spec_roofline"] = tps / (b * kH200PeakBytesPerS / bytes);
    }
    sweep.push_back(*r);
  }
  const std::string picked = o.temperature > 0.f ? "sampled at temperature " + std::to_string(o.temperature) +
                                                       ", top_p " + std::to_string(o.top_p)
                                                 : std::string("greedy");
  // Rows with adapters are replayed too, a recording per adapter composition (model/decode_replay.h).
  const bool replayed = !o.eager && model.backend().replay().available();
  nlohmann::json constrained = nullptr;
  if (constraint.cache) {
    const bool masks_up = !o.host_sampling && model.backend()
                                                  .sampling()
                                                  .supports(SampleRequest{1, model.config().vocab_size, false, true})
                                                  .runs_natively();
    constrained = {{"json_schema", o.json_schema},
                   {"rows", "every row, documents back to back"},
                   {"masks", masks_up ? "filled on the host, applied in the backend's sample (masks go up, ids come back)"
                                      : "filled and applied on the host (each constrained row's logits come down)"},
                   {"compile_ms", constraint.compile_ms},
                   {"cached_compile_ms", constraint.cached_ms}};
  }
  return {{"sampling", picked + (o.host_sampling ? ", on the host (every row's logits copied)" : ", on the device (ids only)")},
          {"execution", replayed ? "graph_replay" : "eager"},
          {"constraint", constrained},
          {"adapters", o.adapters == 0 ? std::string("none")
                                       : std::to_string(o.adapters) + " random adapters of rank " +
                                             std::to_string(o.adapter_rank) + " on every target, row i the (i mod N)-th"},
          {"points", sweep}};
}

// The CUDA backend's plan caches and device memory at the end of the run (null elsewhere).
nlohmann::json device_stats([[maybe_unused]] Backend& be, [[maybe_unused]] uint64_t run_peak) {
#ifdef KILN_HAVE_CUDA
  if (auto st = cuda_backend_stats(be); st.ok())
    return {{"matmul_cache_hits", st->matmul_cache_hits},
            {"matmul_cache_misses", st->matmul_cache_misses},
            {"matmul_plans_timed", st->matmul_plans_timed},
            {"device_pool_peak_in_use_bytes", std::max(run_peak, st->pool_peak_in_use_bytes)},
            {"device_pool_reserved_bytes", st->pool_reserved_bytes},
            {"device_used_bytes_at_end", st->device_used_bytes},
            {"device_total_bytes", st->device_total_bytes}};
#endif
  return nullptr;
}

Status run(const BenchOpts& o) {
  if (o.prompt_tokens < 1 || o.decode_tokens < 1 || o.repeats < 1)
    return invalid_argument("--prompt-tokens, --decode-tokens and --repeats must be positive");
  nlohmann::json peer;  // read before the measurements, so that a bad path costs nothing
  if (!o.peer_json.empty()) {
    KILN_ASSIGN_OR_RETURN(peer, read_peer_json(o.peer_json));
  }
  KILN_ASSIGN_OR_RETURN(std::string dir, resolve_model_dir(o.model));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, create_backend(o.backend));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35Model> model, Qwen35Model::load(dir, *be));
  const ModelConfig& c = model->config();
  if (!o.json_schema.empty() && o.batches.empty()) return invalid_argument("--json-schema constrains the --batches sweep; give --batches");
  KILN_ASSIGN_OR_RETURN(const BenchGrammar constraint, bench_grammar(o, dir, c));
  model->options().prefill_tile = o.prefill_tile;
  const DType default_kv = model->kv_dtype();
  if (o.kv_fp8) KILN_RETURN_IF_ERROR(model->set_kv_dtype(DType::kF8E4M3).with_context("--kv-fp8"));
  KILN_RETURN_IF_ERROR(model->prefill_tile({}).status().with_context("--prefill-tile"));
  const bool device = be->identity().device.kind != DeviceKind::kHost;
  KILN_ASSIGN_OR_RETURN(const Rooflines roof, measure_rooflines(*be, *model, device, o.backend));
  KILN_ASSIGN_OR_RETURN(nlohmann::json one_row, bench_one_row(*model, o, roof, device));

  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json j = {
      {"timestamp_utc", stamp},
      {"backend", be->identity().name},
      {"device", be->identity().device_name},
      // What the kernels were chosen for (KILN_CUDA_TARGET), and whether the driver compiled them from PTX.
      {"target", be->capabilities().compute.target +
                     (be->capabilities().startup.precompiles_kernels || be->identity().name != "cuda" ? "" : " + PTX JIT")},
      {"threads", be->identity().threads},
      {"model", {{"dir", dir},
                 {"hidden_size", c.hidden_size},
                 {"num_layers", c.num_layers},
                 {"vocab_size", c.vocab_size},
                 {"weight_dtype", std::string(dtype_name(model->weights().embed.dtype()))},
                 {"kv_dtype", std::string(dtype_name(model->kv_dtype()))},
                 {"matmul_params", one_row["matmul_params"]},
                 {"matmul_bytes_per_token", one_row["matmul_bytes_per_token"]}}},
      {"roofline", {{"copy_bandwidth_gb_s", roof.bandwidth / 1e9},
                    {"copy_bandwidth_note", roof.bandwidth_note},
                    {"matmul_gflop_s", roof.matmul_rate / 1e9},
                    {"matmul_note", roof.matmul_note}}},
      {"prefill", one_row["prefill"]},
      {"decode", one_row["decode"]},
      {"repeats", o.repeats},
      // What decides each prefill's "tiled" and "tile_tokens" (model/tiled_prefill.h).
      {"prefill_tiling", {{"prefill_tile", o.prefill_tile < 0 ? nlohmann::json("the backend's policy")
                                                              : nlohmann::json(o.prefill_tile)},
                          {"policy", {{"auto_threshold_tokens", be->capabilities().streaming_prefill.auto_threshold_tokens},
                                      {"tile_tokens", be->capabilities().streaming_prefill.tile_tokens}}}}},
  };

  // The engine-level sweep: prefill lengths, decode batches at the context, TTFT.
  uint64_t run_peak = 0;
  if (!o.prefill_tokens.empty()) {
    nlohmann::json sweep = nlohmann::json::array();
    for (int64_t n : o.prefill_tokens) {
      std::fprintf(stderr, "bench: prefill %lld tokens\n", static_cast<long long>(n));
      // Long prompts once (a 32k prompt takes seconds); the short ones take the median.
      auto r = bench_prefill(*model, n, n > 8192 ? 1 : o.repeats, roof.matmul_rate, device, run_peak);
      sweep.push_back(r.ok() ? *r : nlohmann::json{{"tokens", n}, {"error", r.status().to_string()}});
    }
    j["prefill_sweep"] = sweep;
  }
  if (!o.batches.empty()) j["decode_batches"] = bench_decode_batches(*model, o, roof.bandwidth, device, constraint);
  if (o.ttft_tokens > 0) {
    std::fprintf(stderr, "bench: TTFT of a %lld-token prompt\n", static_cast<long long>(o.ttft_tokens));
    KILN_ASSIGN_OR_RETURN(j["ttft"], bench_engine_ttft(*model, o.ttft_tokens, o.repeats, engine_opts(o)));
  }
  if (o.kv_fp8) {
    std::fprintf(stderr, "bench: logits with e4m3 K/V against %s K/V\n", std::string(dtype_name(default_kv)).c_str());
    KILN_ASSIGN_OR_RETURN(j["kv_effect"], bench_kv_effect(*model, default_kv, o.prompt_tokens, o.decode_tokens));
  }
  if (device) j["spec_peaks"] = {{"bandwidth_tb_s", kH200PeakBytesPerS / 1e12}, {"bf16_tflop_s", kH200PeakBf16FlopPerS / 1e12},
                                 {"note", "H200 SXM spec sheet: the rooflines the CUDA targets are quoted against"}};
  if (!peer.is_null()) j["peer"] = std::move(peer);
  if (nlohmann::json stats = device_stats(*be, run_peak); !stats.is_null()) j["cuda"] = std::move(stats);
  return emit_document(std::move(j), "");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode throughput next to their rooflines (JSON)");
  auto o = std::make_shared<BenchOpts>();
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION]; default: the random-weight 'small' checkpoint");
  cmd->add_option("--backend", o->backend, "Backend to measure")->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Prompt length of the prefill measurement")->capture_default_str();
  cmd->add_option("--decode-tokens", o->decode_tokens, "Tokens decoded after the prefill")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Repetitions; the median is reported")->capture_default_str();
  cmd->add_option("--batches", o->batches, "Engine decode sweep: sequences decoded together (e.g. 1,8,32,64,128)")
      ->delimiter(',');
  cmd->add_option("--context", o->context, "Engine decode sweep: prompt tokens of each sequence")->capture_default_str();
  cmd->add_option("--prefill-tokens", o->prefill_tokens, "Prefill sweep: prompt lengths (e.g. 512,4096,32768)")
      ->delimiter(',');
  cmd->add_option("--prefill-tile", o->prefill_tile,
                  "Tiling of every prefill measured: -1 the backend's policy (capabilities: streaming_prefill), "
                  "0 untiled, N (a multiple of 64) passes of N tokens for prompts longer than N")
      ->capture_default_str();
  cmd->add_option("--ttft-tokens", o->ttft_tokens, "Engine time to first token of a prompt of this length (0: off)")
      ->capture_default_str();
  cmd->add_flag("--host-sampling", o->host_sampling, "Engine sweep: copy every row's logits to the host (the old path)");
  cmd->add_flag("--eager", o->eager, "Engine sweep: run every decode step eagerly (no CUDA graph replay)");
  cmd->add_option("--temperature", o->temperature, "Engine decode sweep: sample at this temperature instead of greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Engine decode sweep: top_p of the sampled rows (with --temperature)")
      ->check(CLI::Range(0.000001, 1.0))
      ->capture_default_str();
  cmd->add_option("--adapters", o->adapters,
                  "Engine decode sweep: rows use N random LoRA adapters (every target), row i the (i mod N)-th; "
                  "their factors count in the roofline's bytes (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--adapter-rank", o->adapter_rank, "Rank of the --adapters")
      ->check(CLI::Range(int64_t{1}, int64_t{256}))
      ->capture_default_str();
  cmd->add_flag("--kv-fp8", o->kv_fp8,
                "Keep K/V in fp8 e4m3 (memory.kv_cache_fp8; CUDA only) and report its effect on the logits against "
                "the default K/V dtype (kv_effect)");
  cmd->add_option("--json-schema", o->json_schema,
                  "Engine decode sweep: constrain every row by this JSON Schema file (documents back to back; "
                  "adds mask_us_per_token and mask_ms_per_step to each point)");
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer directory of --json-schema (default: the model's)");
  cmd->add_option("--peer-json", o->peer_json, "JSON of a peer run (tools/bench_hf_peer.py), included as `peer`");
  add_bench_serve_command(*cmd);
  add_bench_train_command(*cmd);
  add_bench_correction_command(*cmd);
  add_bench_soak_command(*cmd);
  add_bench_eval_command(*cmd);
  cmd->callback([o, cmd] {
    if (!cmd->get_subcommands().empty()) return;  // `kiln bench serve|train|correction` ran instead
    report(run(*o));
  });
}

}  // namespace kiln::cli
