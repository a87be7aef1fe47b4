// What the inference routes share: reading the body, answering with JSON or an ApiError, the
// checks that need the served model (model id, adapters, context length), logprob entries, and
// the SSE writer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace kiln {

// Serialises with invalid UTF-8 replaced (token text can hold partial characters).
std::string dump_json(const Json& j);
void send_json(httplib::Response& res, int status, const Json& body);
void send_error(httplib::Response& res, const ApiError& e);
// A refused request's body up to this size is read and dropped before the answer, so that the
// client, still sending, hears the answer and the connection stays usable (send_error_and_close
// is for what is not drained).
inline constexpr int64_t kDrainBytes = int64_t{16} << 20;
// The error as the last answer on its connection: for a request whose body was not read to its
// end, whose remaining bytes must not be taken for the next request. (cpp-httplib 0.11 keeps a
// connection open whatever the response's headers say; a content provider that reports failure
// after writing the whole answer makes it close.)
void send_error_and_close(httplib::Response& res, const ApiError& e);
// Parses the body as JSON of at most kMaxJsonDepth levels (core/json_text.h); the error names
// the byte offset of a syntax error or of the level too deep.
std::optional<ApiError> parse_body(const httplib::Request& req, Json& body);

inline constexpr size_t kMaxMergeSources = 16;  // sources of one POST /v1/adapters/merge
// The largest LoRA rank the serving backend trains and serves (its capabilities; 256 where they
// state none): merges and uploads beyond it are refused.
int64_t max_lora_rank(const ServerContext& ctx);

// A request's dataset_path resolved inside training.data_dir (core/confined_path.h): a regular
// file of at most training.max_dataset_bytes; else the 400 naming dataset_path.
Result<std::string> dataset_file(const ServerContext& ctx, const std::string& path);

// 503 when the route family is still under qualification on the serving backend (some gate it
// rests on has no passing evidence: route_gates.h) and the profile is not `experimental`.
std::optional<ApiError> check_qualified(const ServerContext& ctx, RouteFamily family);
// 404 for a model id other than the served one or an adapter that is not loaded; 503 in the
// maintenance profile, or while inference is under qualification (check_qualified).
std::optional<ApiError> check_target(const ServerContext& ctx, const GenerationRequest& gen);
// Token ids inside the vocabulary; prompt shorter than the context (413); max_tokens within
// what the context leaves (400). Sets `max_tokens` (the default when the request gave none).
std::optional<ApiError> check_prompt(const ServerContext& ctx, const std::vector<int32_t>& prompt,
                                     const GenerationRequest& gen, const std::string& prompt_field,
                                     int64_t& max_tokens);

// The request's output constraint: its grammar compiled through ctx.structured into in.grammar
// (the compiler's refusal, which names the JSON pointer, GBNF line or pattern offset, is a 400
// naming gen.grammar_field) and its logit_bias ids checked against the vocabulary (400 naming the
// key). The compile runs on the caller's (handler's) thread, within kRequestCompileLimits.
std::optional<ApiError> prepare_constraints(ServerContext& ctx, const GenerationRequest& gen, GenerationInput& in);

// The text of one token as the client sees it in logprobs (bytes of a partial character are
// replaced when serialised) and its raw bytes.
std::string token_text(const ServerContext& ctx, int32_t id);
// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs(const ServerContext& ctx, const std::vector<TokenRecord>& tokens);
// Completions logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; with
// `echo_prompt` the prompt's tokens come first (the first one's logprob is null), scored by
// `prompt_scores` (prompt tokens 1..).
Json completion_logprobs(const ServerContext& ctx, const std::vector<TokenRecord>& tokens, size_t text_offset,
                         const std::vector<int32_t>* echo_prompt = nullptr,
                         const std::vector<SampledToken>* prompt_scores = nullptr);
// prompt_logprobs: [null, {"token", "token_id", "logprob", "top_logprobs": [...]}, ...], one per prompt token.
Json prompt_logprobs_json(const ServerContext& ctx, const std::vector<int32_t>& prompt,
                          const std::vector<SampledToken>& scores);

std::string new_request_id(const char* prefix);  // prefix + 24 hex digits
int64_t unix_seconds();

// Usage block of a response.
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
// The response's `adapters` field (docs/serving.md): the stack a request resolved at submit,
// [{"name", "revision", "scale"}] in the order applied; [] for the base model.
Json adapters_json(const std::vector<ResolvedAdapter>& adapters);

// Answers a non-streaming request once every choice of `gens` has finished: `build` makes the
// body (an ApiError's JSON when a choice failed: the 200 status is sent before generation ends).
// A client that disconnects, or the request timeout, cancels the choices.
void respond_when_done(ServerContext& ctx, httplib::Response& res, std::vector<std::shared_ptr<Generation>> gens,
                       std::function<Json()> build);

// Streams `g` as server-sent events: `make_chunks` turns a delta into zero or more JSON chunks,
// `final_chunks` (called once at the end) adds e.g. the usage chunk; then `data: [DONE]`. A
// write that fails (client gone) cancels the generation.
// A request's time limit (server.request_timeout_secs from its start); `due` is true once, the
// first time it is asked after the limit passed or the server began stopping: then cancel.
class RequestDeadline {
 public:
  explicit RequestDeadline(const ServerContext& ctx)
      : ctx_(&ctx), at_(std::chrono::steady_clock::now() + std::chrono::seconds(ctx.config.server.request_timeout_secs)) {}
  bool due() {
    if (passed_ || !(std::chrono::steady_clock::now() > at_ || ctx_->stopping.load())) return false;
    passed_ = true;
    return true;
  }

 private:
  const ServerContext* ctx_;
  std::chrono::steady_clock::time_point at_;
  bool passed_ = false;
};

// One log line when a client goes away mid-answer (`how`: what showed it).
void log_client_gone(const char* how);

using ChunkMaker = std::function<void(const ChoiceDelta&, std::vector<Json>&)>;
using FinalChunks = std::function<void(const Generation&, std::vector<Json>&)>;
void stream_sse(ServerContext& ctx, httplib::Response& res, std::shared_ptr<Generation> g, ChunkMaker make_chunks,
                FinalChunks final_chunks, std::vector<Json> first_chunks);

}  // namespace kiln
