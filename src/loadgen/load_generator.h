// The serving load generator: C client threads issue streaming chat completions against an
// OpenAI-compatible server, each waiting for its response before sending the next, until a
// request count or a duration is reached; the result aggregates their measurements
// (chat_stream.h says what is measured and how).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "loadgen/chat_stream.h"
#include "loadgen/latency_stats.h"
#include "loadgen/prompt_set.h"

namespace kiln::loadgen {

struct LoadSpec {
  std::string base_url;      // "http://HOST:PORT", optionally with a path prefix
  std::string model;         // the requests' `model` field
  int64_t concurrency = 1;   // client threads, each with one request in flight
  int64_t requests = 0;      // 0: default_request_count() (or no limit when duration_s > 0)
  double duration_s = 0;     // > 0: no request starts after this many seconds
  int64_t max_tokens = 256;  // a prompt's own max_tokens replaces it
  uint64_t seed = 0;         // request i sends seed + i
  double temperature = 0;
  double request_timeout_s = 600;  // per read on the socket
  std::string api_key;             // "" : none; else sent as "Authorization: Bearer <key>"
  // Called after each request, from the client threads, one call at a time; `done` counts the
  // requests finished so far. For progress output.
  std::function<void(const RequestRecord&, int64_t done)> on_request_done;
  // Called for each request before it is sent (from the client threads, concurrently): may set
  // its adapter or ask it to disconnect.
  std::function<void(int64_t index, ChatRequest&)> shape_request;
};

// The prompt set size rounded up to a multiple of the concurrency, and at least twice it, so
// that every thread runs at least two requests and every prompt is sent at least once.
int64_t default_request_count(int64_t prompts, int64_t concurrency);

struct LoadResult {
  int64_t concurrency = 0;
  int64_t requests = 0;                 // issued
  int64_t errors = 0;
  int64_t disconnected = 0;             // closed by the client as asked (shape_request)
  int64_t requests_without_tokens = 0;  // succeeded, but reported no output token
  double duration_s = 0;                // first send to last response
  int64_t output_tokens = 0;            // over successful requests
  LatencySummary ttft_ms;               // successful requests with a content chunk
  LatencySummary inter_token_latency_ms;
  std::string first_error;              // the lowest-numbered failed request's error; "" if none
  std::vector<RequestRecord> records;   // by request index

  // Successful requests and their output tokens per second of duration.
  double requests_per_second() const;
  double output_tokens_per_second() const;
};

// Request i sends prompt i mod N with seed + i. Fails only for an unusable spec (named field);
// failed requests are counted in the result.
Result<LoadResult> run_load(const LoadSpec& spec, const PromptSet& prompts);

// {"concurrency", "requests", "errors", "requests_without_tokens", "duration_s",
//  "disconnected", "requests_per_second", "output_tokens", "output_tokens_per_second", "ttft_ms": {p50, p99,
//  mean}, "inter_token_latency_ms": {p50, p99, mean}, "first_error": string or null}.
nlohmann::json load_result_json(const LoadResult& r);

}  // namespace kiln::loadgen
