#include "server/route_support.h"

#include <cstdio>
#include <random>

#include "core/confined_path.h"
#include "core/json_text.h"

namespace kiln {

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.retry_after_secs > 0) res.set_header("Retry-After", std::to_string(e.retry_after_secs));
  res.status = e.http_status;
  res.set_content(e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void send_error_and_close(httplib::Response& res, const ApiError& e) {
  send_error(res, e);
  res.set_header("Connection", "close");
  auto body = std::make_shared<std::string>(std::move(res.body));
  res.body.clear();
  res.headers.erase("Content-Type");  // set again by set_content_provider
  res.set_content_provider(body->size(), "application/json",
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body->data() + offset, length);
                             return false;
                           });
}

std::optional<ApiError> parse_body(const httplib::Request& req, Json& body) {
  auto parsed = parse_ordered_json(req.body, "the request body");
  if (!parsed.ok()) return ApiError::invalid("", parsed.status().message());
  body = std::move(*parsed);
  return std::nullopt;
}

int64_t max_lora_rank(const ServerContext& ctx) {
  const int most = ctx.backend_impl ? ctx.backend_impl->capabilities().training.muon_rank_max : 0;
  return most > 0 ? most : 256;
}

Result<std::string> dataset_file(const ServerContext& ctx, const std::string& path) {
  return confined_file({ctx.data_dir, "training.data_dir"}, path, "dataset_path", ctx.config.training.max_dataset_bytes);
}

std::optional<ApiError> check_qualified(const ServerContext& ctx, RouteFamily family) {
  if (ctx.config.server.profile == "experimental") return std::nullopt;
  const std::vector<std::string> open = ctx.gates.open_gates(family);
  if (open.empty()) return std::nullopt;
  std::string gates;
  for (const std::string& g : open) gates += (gates.empty() ? "" : ", ") + g;
  ApiError e;
  e.http_status = 503;
  e.type = "server_unavailable";
  e.code = "route_under_qualification";
  e.message = std::string(route_family_name(family)) + " on the '" + ctx.backend +
              "' backend is still under qualification (no passing evidence for: " + gates + "); the '" +
              ctx.config.server.profile + "' profile refuses it, server.profile = \"experimental\" admits it";
  return e;
}

std::optional<ApiError> prepare_constraints(ServerContext& ctx, const GenerationRequest& gen, GenerationInput& in) {
  for (const auto& [id, bias] : gen.logit_bias)
    if (id >= ctx.vocab_size)
      return ApiError::invalid("logit_bias", "logit_bias." + std::to_string(id) + ": token id outside the vocabulary (" +
                                                 std::to_string(ctx.vocab_size) + " ids)");
  if (!gen.grammar) return std::nullopt;
  if (gen.ignore_eos)
    return ApiError::invalid("ignore_eos", "ignore_eos cannot be combined with " + gen.grammar_field +
                                               " (a structured output ends with an end-of-text token)");
  if (!ctx.structured)
    return ApiError::invalid(gen.grammar_field, "structured outputs are not available on this server");
  auto compiled = ctx.structured->compile(*gen.grammar);
  if (!compiled.ok()) return ApiError::invalid(gen.grammar_field, gen.grammar_field + ": " + compiled.status().message());
  in.grammar = std::move(*compiled);
  return std::nullopt;
}

std::optional<ApiError> check_target(const ServerContext& ctx, const GenerationRequest& gen) {
  if (ctx.config.server.profile == "maintenance") {
    ApiError e;
    e.http_status = 503;
    e.type = "server_unavailable";
    e.code = "maintenance";
    e.message = "the server runs the 'maintenance' profile: inference is refused (training and adapter changes only)";
    return e;
  }
  if (auto e = check_qualified(ctx, RouteFamily::kInference)) return e;
  if (!gen.model.empty() && gen.model != ctx.model_id) {
    ApiError e = ApiError::invalid("model", "model '" + gen.model + "' is not served here; this server serves '" +
                                                ctx.model_id + "'");
    e.http_status = 404;
    e.code = "model_not_found";
    return e;
  }
  auto check_adapter = [&ctx](const std::string& name, const std::string& param) -> std::optional<ApiError> {
    Status st = ctx.adapters ? ctx.adapters->resolve(name).status()
                             : not_found("adapter '" + name + "' is not loaded (no adapters are loaded)");
    if (st.ok()) return std::nullopt;
    ApiError e = ApiError::invalid(param, st.message());
    e.http_status = 404;
    e.code = "adapter_not_found";
    return e;
  };
  if (!gen.adapter.empty())
    if (auto e = check_adapter(gen.adapter, "adapter")) return e;
  for (size_t i = 0; i < gen.adapters.size(); ++i)
    if (auto e = check_adapter(gen.adapters[i].name, "adapters[" + std::to_string(i) + "].name")) return e;
  return std::nullopt;
}

std::optional<ApiError> check_prompt(const ServerContext& ctx, const std::vector<int32_t>& prompt,
                                     const GenerationRequest& gen, const std::string& prompt_field, int64_t& max_tokens) {
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] >= ctx.vocab_size)
      return ApiError::invalid(prompt_field, prompt_field + ": token " + std::to_string(prompt[i]) +
                                                 " is outside the vocabulary (" + std::to_string(ctx.vocab_size) + ")");
  for (int32_t t : gen.stop_token_ids)
    if (t >= ctx.vocab_size)
      return ApiError::invalid("stop_token_ids", "stop_token_ids: " + std::to_string(t) + " is outside the vocabulary");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n >= ctx.max_context) {
    ApiError e = ApiError::invalid(prompt_field, "the prompt is " + std::to_string(n) +
                                                     " tokens; the context holds " + std::to_string(ctx.max_context) +
                                                     " (prompt and generated tokens together)");
    e.http_status = 413;
    e.code = "context_length_exceeded";
    return e;
  }
  const int64_t left = ctx.max_context - n;
  if (gen.max_tokens) {
    if (*gen.max_tokens > left)
      return ApiError::invalid("max_tokens", "max_tokens " + std::to_string(*gen.max_tokens) + " exceeds what the context leaves: " +
                                                 std::to_string(left) + " (context " + std::to_string(ctx.max_context) +
                                                 ", prompt " + std::to_string(n) + " tokens)");
    max_tokens = *gen.max_tokens;
  } else {
    max_tokens = std::min(left, ctx.default_max_tokens);
  }
  return std::nullopt;
}

std::string token_text(const ServerContext& ctx, int32_t id) {
  std::string bytes;
  (void)ctx.tokenizer->append_token_bytes(id, SpecialTokenOutput::kKeep, false, bytes);
  return bytes;
}

namespace {

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

Json chat_logprobs(const ServerContext& ctx, const std::vector<TokenRecord>& tokens) {
  Json content = Json::array();
  for (const auto& t : tokens) {
    const std::string text = token_text(ctx, t.id);
    Json top = Json::array();
    for (const auto& alt : t.top) {
      const std::string at = token_text(ctx, alt.token);
      top.push_back({{"token", at}, {"logprob", alt.logprob}, {"bytes", bytes_of(at)}});
    }
    content.push_back({{"token", text}, {"logprob", t.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

Json completion_logprobs(const ServerContext& ctx, const std::vector<TokenRecord>& tokens, size_t text_offset,
                         const std::vector<int32_t>* echo_prompt, const std::vector<SampledToken>* prompt_scores) {
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  auto add = [&](int32_t id, Json logprob, Json top) {
    const std::string text = token_text(ctx, id);
    toks.push_back(text);
    lps.push_back(std::move(logprob));
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += text.size();
  };
  auto top_object = [&](const std::vector<TokenLogprob>& alts) {
    Json top = Json::object();
    for (const auto& alt : alts) top[token_text(ctx, alt.token)] = alt.logprob;
    return top;
  };
  if (echo_prompt) {
    text_offset = 0;
    for (size_t i = 0; i < echo_prompt->size(); ++i) {
      const SampledToken* s = prompt_scores && i >= 1 && i - 1 < prompt_scores->size() ? &(*prompt_scores)[i - 1] : nullptr;
      add((*echo_prompt)[i], s ? Json(s->logprob) : Json(nullptr), s ? top_object(s->top) : Json(nullptr));
    }
  }
  for (const auto& t : tokens) add(t.id, t.logprob, top_object(t.top));
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

Json prompt_logprobs_json(const ServerContext& ctx, const std::vector<int32_t>& prompt,
                          const std::vector<SampledToken>& scores) {
  Json out = Json::array({nullptr});
  for (size_t i = 0; i < scores.size() && i + 1 < prompt.size(); ++i) {
    Json top = Json::array();
    for (const auto& alt : scores[i].top)
      top.push_back({{"token", token_text(ctx, alt.token)}, {"token_id", alt.token}, {"logprob", alt.logprob}});
    out.push_back({{"token", token_text(ctx, prompt[i + 1])}, {"token_id", prompt[i + 1]},
                   {"logprob", scores[i].logprob}, {"top_logprobs", top}});
  }
  return out;
}

std::string new_request_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffull));
  return std::string(prefix) + buf;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

Json adapters_json(const std::vector<ResolvedAdapter>& adapters) {
  Json out = Json::array();
  for (const ResolvedAdapter& a : adapters) out.push_back({{"name", a.name}, {"revision", a.revision}, {"scale", a.weight}});
  return out;
}

void log_client_gone(const char* how) {
  std::fprintf(stderr, "kiln: a client left before its answer was complete (%s): its request is cancelled\n", how);
}

void stream_sse(ServerContext& ctx, httplib::Response& res, std::shared_ptr<Generation> g, ChunkMaker make_chunks,
                FinalChunks final_chunks, std::vector<Json> first_chunks) {
  struct StreamState {
    std::shared_ptr<Generation> g;
    std::vector<Json> pending;
    bool done = false;
    std::optional<RequestDeadline> deadline;
  };
  auto st = std::make_shared<StreamState>();
  st->g = std::move(g);
  st->pending = std::move(first_chunks);
  st->deadline.emplace(ctx);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, make_chunks, final_chunks](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto flush = [&] {
          for (const Json& j : st->pending)
            if (!write("data: " + dump_json(j) + "\n\n")) return false;
          st->pending.clear();
          return true;
        };
        if (!flush()) {
          log_client_gone("a write failed");
          st->g->cancel();
          return false;
        }
        if (!st->done) {
          bool alive = sink.is_writable();
          const bool more = alive && st->g->pump(std::chrono::milliseconds(50), [&](const ChoiceDelta& d) {
            make_chunks(d, st->pending);
            return true;
          });
          if (!alive) {
            log_client_gone("the socket is closed");
            st->g->cancel();
            return false;
          }
          if (st->deadline->due()) st->g->cancel();
          if (!flush()) {
            st->g->cancel();
            return false;
          }
          if (!more) {
            st->done = true;
            final_chunks(*st->g, st->pending);
            if (!flush()) return false;
            write("data: [DONE]\n\n");
            sink.done();
          }
        }
        return true;
      },
      [st](bool) { st->g->cancel(); });
}

}  // namespace kiln
