// One streaming chat completion as the load generator sees it: the request body it sends
// (`"stream": true` with usage), and what it measures while the SSE chunks arrive.
//
// Measurement rules:
// - TTFT: from just before the request is sent to the first chunk whose delta carries non-empty
//   `content` or `reasoning_content`, or a non-empty `tool_calls` array ("a content chunk").
// - A content chunk counts as the number of entries in its `logprobs.content` when the server
//   sent them (several tokens in one chunk), else as one token.
// - Inter-token latency: the gap between successive content chunks, divided by the later chunk's
//   token count and recorded once per token; the extra tokens of the first chunk add no sample.
// - Output tokens: `usage.completion_tokens` of the usage chunk; without one, the sum of the
//   content chunks' token counts.
// - A request asked to disconnect closes the stream after that many content chunks; it is counted
//   apart (disconnected), neither as an error nor in the output tokens.
// - Errors: a transport failure, an HTTP status other than 200, an `error` object in the stream,
//   a chunk that is not JSON, or a stream that ends without `data: [DONE]`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace kiln::loadgen {

struct ChatRequest {
  std::string path = "/v1/chat/completions";  // with the base URL's path prefix, if any
  std::string model;
  const nlohmann::json* messages = nullptr;  // the OpenAI messages array
  int64_t max_tokens = 256;
  uint64_t seed = 0;
  double temperature = 0;
  std::string adapter;                  // "": the base model; else the request's `adapter`
  int64_t disconnect_after_chunks = 0;  // > 0: the client closes the stream after this many content chunks
};

// The JSON body sent for `r`.
nlohmann::json chat_request_body(const ChatRequest& r);

struct RequestRecord {
  int64_t index = 0;          // the request's number within the run (its seed is seed + index)
  std::string prompt_id;
  std::string error;          // "" when the request succeeded
  int http_status = 0;        // 0: no response status was received
  double ttft_ms = -1;        // < 0: no content chunk arrived
  std::vector<double> inter_token_ms;
  int64_t content_chunks = 0;
  int64_t output_tokens = 0;
  bool usage_reported = false;
  double latency_ms = 0;      // send to the end of the response
  double start_ms = 0;        // when it was sent, from the start of the run (run_load sets it)
  bool disconnected = false;  // the client closed the stream as its request asked: not an error

  bool ok() const { return error.empty(); }
};

// A non-200 answer as a short message: "HTTP 401: <the OpenAI error's message>", else the body's
// first 200 bytes.
std::string http_error(int status, const std::string& body);

// Sends `r` on `client` (whose timeouts and API key the caller set) and measures the stream.
RequestRecord stream_chat_completion(httplib::Client& client, const ChatRequest& r);

}  // namespace kiln::loadgen
