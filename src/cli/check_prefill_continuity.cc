// `kiln check prefill-continuity`: one prompt prefilled three ways on one backend - in one pass,
// in uneven chunks carried across calls (as the engine's chunked prefill does), and tiled (the
// forward's own passes of a tile) - must leave the same last logits and GDN state (recurrent and
// conv) and continue with the same greedy tokens. Prints the telemetry (JSON): each route's
// passes and where they start, its differences from the single pass, its greedy tokens; with
// KILN_QUALIFICATION_CASE_RESULT set it also writes the case result `prefill-continuity`.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "loadgen/serving_case_result.h"
#include "model/qwen35.h"

namespace kiln::cli {
namespace {

struct ContinuityOpts {
  std::string model, backend = "cpu", chunks = "37,64,129,200", out;
  int64_t prompt_tokens = 700, tile = 128, decode_tokens = 8;
  uint64_t seed = 0;
  double tolerance = 1e-4;
};

// What one route leaves behind.
struct Route {
  std::vector<int64_t> starts;     // where each pass (or chunk) begins in the prompt
  std::vector<float> last_logits;  // the prompt's last token's
  std::vector<float> state;        // every GDN layer's recurrent then conv state, layer by layer
  std::vector<int32_t> greedy;     // the tokens that follow, greedy
};

Result<std::vector<int64_t>> parse_chunks(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 1'000'000)
      return invalid_argument("--chunks: '" + item + "' is not a chunk length (1..1000000)");
    out.push_back(v);
  }
  if (out.empty()) return invalid_argument("--chunks: no chunk lengths given");
  return out;
}

int32_t host_argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<float> to_vector(const Tensor& host) {
  const float* p = host.data<float>();
  return std::vector<float>(p, p + host.numel());
}

// Prefills `prompt` as `pieces` (consecutive lengths), each one forward under `tile`
// (ForwardOptions::prefill_tile), then decodes greedily.
Result<Route> run_route(Qwen35Model& model, const std::vector<int32_t>& prompt,
                        const std::vector<int64_t>& pieces, int64_t tile, int64_t decode_tokens) {
  model.options().prefill_tile = tile;
  const int64_t total = static_cast<int64_t>(prompt.size()) + decode_tokens;
  KILN_ASSIGN_OR_RETURN(ModelState state,
                        model.create_state({1, (total + ModelState::kBlockSize - 1) / ModelState::kBlockSize}));
  KILN_ASSIGN_OR_RETURN(SequenceState seq, state.new_sequence());
  Route r;
  int64_t done = 0;
  Tensor logits;
  for (int64_t len : pieces) {
    SequenceInput row{&seq, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(done), static_cast<size_t>(len))};
    KILN_ASSIGN_OR_RETURN(int64_t pass_tile, model.prefill_tile({&row, 1}));
    for (int64_t at = 0; at < len; at += pass_tile > 0 ? pass_tile : len) r.starts.push_back(done + at);
    KILN_ASSIGN_OR_RETURN(logits, model.forward({&row, 1}, LogitsMode::kLast, state));
    done += len;
  }
  r.last_logits = to_vector(logits);
  KILN_ASSIGN_OR_RETURN(r.state, state.slot_to_host(seq.slot));
  model.options().prefill_tile = 0;
  std::vector<float> next = r.last_logits;
  for (int64_t step = 0; step < decode_tokens; ++step) {
    const int32_t tok = host_argmax(next);
    r.greedy.push_back(tok);
    SequenceInput row{&seq, std::span<const int32_t>(&r.greedy.back(), 1)};
    KILN_ASSIGN_OR_RETURN(Tensor l, model.forward({&row, 1}, LogitsMode::kLast, state));
    next = to_vector(l);
  }
  state.release(seq);
  model.options().prefill_tile = -1;
  return r;
}

// max |a - b| over max |a|: 0 for equal vectors, scale-free across models and backends.
double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

int64_t mismatches(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

Status run(const ContinuityOpts& o) {
  if (o.prompt_tokens < 2 || o.prompt_tokens > 1'000'000)
    return invalid_argument("--prompt-tokens must be in 2..1000000");
  if (o.decode_tokens < 1 || o.decode_tokens > 4096) return invalid_argument("--decode-tokens must be in 1..4096");
  if (o.tile < 64 || o.tile % ModelState::kBlockSize != 0)
    return invalid_argument("--tile must be a positive multiple of " + std::to_string(ModelState::kBlockSize));
  if (o.tile >= o.prompt_tokens)
    return invalid_argument("--tile (" + std::to_string(o.tile) + ") must be shorter than --prompt-tokens (" +
                            std::to_string(o.prompt_tokens) + "), or the tiled route is one pass");
  if (!(o.tolerance > 0 && o.tolerance < 1)) return invalid_argument("--tolerance must be in (0, 1)");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> cycle, parse_chunks(o.chunks));
  KILN_ASSIGN_OR_RETURN(std::string dir, resolve_model_dir(o.model));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, create_backend(o.backend));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35Model> model, Qwen35Model::load(dir, *be));
  const int64_t vocab = model->config().vocab_size;

  // A fixed pseudo-random prompt (a 64-bit LCG from the seed).
  std::vector<int32_t> prompt;
  uint64_t x = o.seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < o.prompt_tokens; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    prompt.push_back(static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab)));
  }
  std::vector<int64_t> pieces;  // the chunk lengths, cycled, the last cut to fit
  for (int64_t left = o.prompt_tokens, i = 0; left > 0; ++i) {
    pieces.push_back(std::min(left, cycle[static_cast<size_t>(i) % cycle.size()]));
    left -= pieces.back();
  }
  std::fprintf(stderr, "check prefill-continuity: %lld prompt tokens on %s: single pass, %zu chunks, tiles of %lld\n",
               static_cast<long long>(o.prompt_tokens), be->identity().device_name.c_str(), pieces.size(),
               static_cast<long long>(o.tile));
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(Route single, run_route(*model, prompt, {o.prompt_tokens}, 0, o.decode_tokens));
  KILN_ASSIGN_OR_RETURN(Route chunked, run_route(*model, prompt, pieces, 0, o.decode_tokens));
  KILN_ASSIGN_OR_RETURN(Route tiled, run_route(*model, prompt, {o.prompt_tokens}, o.tile, o.decode_tokens));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  auto route_json = [&](const Route& r, bool reference) {
    nlohmann::json j = {{"passes", r.starts.size()}, {"pass_starts", r.starts}, {"greedy_tokens", r.greedy}};
    if (!reference) {
      j["logits_relative_diff"] = relative_diff(single.last_logits, r.last_logits);
      j["state_relative_diff"] = relative_diff(single.state, r.state);
      j["greedy_mismatches"] = mismatches(single.greedy, r.greedy);
    }
    return j;
  };
  nlohmann::json routes = {{"single", route_json(single, true)},
                           {"chunked", route_json(chunked, false)},
                           {"tiled", route_json(tiled, false)}};
  bool holds = tiled.starts.size() > 1;  // a tiled route of one pass would prove nothing
  for (const char* name : {"chunked", "tiled"}) {
    const nlohmann::json& r = routes[name];
    holds = holds && r["logits_relative_diff"].get<double>() <= o.tolerance &&
            r["state_relative_diff"].get<double>() <= o.tolerance && r["greedy_mismatches"].get<int64_t>() == 0;
  }
  nlohmann::json doc = {{"kind", "check_prefill_continuity"},
                        {"model", dir},
                        {"backend", be->identity().name},
                        {"device", be->identity().device_name},
                        {"seed", o.seed},
                        {"prompt_tokens", o.prompt_tokens},
                        {"chunks", cycle},
                        {"tile", o.tile},
                        {"decode_tokens", o.decode_tokens},
                        {"tolerance", o.tolerance},
                        {"state_values", single.state.size()},
                        {"routes", routes},
                        {"holds", holds},
                        {"note", "relative differences are max |route - single| over max |single|, of the prompt's last "
                                 "logits and of every GDN layer's recurrent and conv state; greedy tokens continue "
                                 "each route's own state"}};
  if (const char* path = std::getenv("KILN_QUALIFICATION_CASE_RESULT"); path != nullptr) {
    using loadgen::case_metric;
    nlohmann::json metrics = nlohmann::json::array();
    for (const auto& [name, route] : {std::pair{"chunked", &chunked}, std::pair{"tiled", &tiled}}) {
      const nlohmann::json& r = routes[name];
      const std::string n = name;
      metrics.push_back(case_metric(n + "_greedy_mismatches", r["greedy_mismatches"].get<double>(), "count"));
      metrics.push_back(case_metric(n + "_logits_relative_diff", r["logits_relative_diff"].get<double>(), "ratio"));
      metrics.push_back(case_metric(n + "_passes", static_cast<double>(route->starts.size()), "count"));
      metrics.push_back(case_metric(n + "_state_relative_diff", r["state_relative_diff"].get<double>(), "ratio"));
    }
    const nlohmann::json result = loadgen::case_result(
        "prefill-continuity", holds, seconds,
        {{"backend", be->identity().name}, {"chunks", o.chunks}, {"decode_tokens", o.decode_tokens},
         {"prompt_tokens", o.prompt_tokens}, {"tile", o.tile}, {"tolerance", o.tolerance}},
        std::move(metrics), doc);
    KILN_RETURN_IF_ERROR(loadgen::write_case_result(path, result));
  }
  KILN_RETURN_IF_ERROR(emit_document(doc, o.out));
  if (!holds) return failed_precondition("prefill routes disagree beyond --tolerance (see routes in the JSON)");
  return {};
}

}  // namespace

void add_check_prefill_continuity_command(CLI::App& check) {
  auto* cmd = check.add_subcommand(
      "prefill-continuity",
      "One prompt prefilled in a single pass, in uneven chunks across calls and tiled must leave the same last logits "
      "and GDN state and continue with the same greedy tokens (JSON; exit 1 when it does not)");
  auto o = std::make_shared<ContinuityOpts>();
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION]; default: the random-weight "
                                       "'small' checkpoint");
  cmd->add_option("--backend", o->backend, "Backend to check")->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Prompt length")->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "Chunk lengths of the chunked route, comma-separated, cycled")
      ->capture_default_str();
  cmd->add_option("--tile", o->tile, "Tile of the tiled route (a multiple of 64, shorter than the prompt)")
      ->capture_default_str();
  cmd->add_option("--decode-tokens", o->decode_tokens, "Greedy tokens decoded after each route's prefill")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the prompt's token ids")->capture_default_str();
  cmd->add_option("--tolerance", o->tolerance, "Largest relative difference (of logits and of state) that passes")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Also write the JSON document to this file");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
