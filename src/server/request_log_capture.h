// The request log's view of one HTTP exchange: what an inference route was asked and what it
// answered, as one row of the RequestLog. The response is taken from the bytes the client
// received, so a stream is logged as the answer it adds up to (reassemble_sse), not as its chunks.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace kiln {

struct ServerContext;

// Rows look like:
//   {"ts": "2026-11-30T15:04:05.123Z", "route": "/v1/chat/completions", "status": 200,
//    "duration_ms": 41.2, "model": "...", "stream": true,
//    "adapter": "name" | null, "adapter_revision": 3 | null,
//    "adapters": [{"name", "scale", "revision"}] (only for a stack),
//    "request": <body as JSON, or a string when it is not JSON>,
//    "response": <the JSON answer; a stream reassembled> | null,
//    "error": <the OpenAI error object> | null, "usage": {...} | null}
// Usage is what the answer carries: every non-streaming answer, and a stream that asked for it
// (stream_options.include_usage).
class RequestCapture;

// Starts a row for `req` (the clock, the adapters it names resolved to their revisions now);
// null when the request log is off.
std::shared_ptr<RequestCapture> begin_request_log(ServerContext& ctx, const char* route, const httplib::Request& req);
// Called once the handler returned: logs at once, or, for a response written by a content
// provider (streams and respond_when_done), records its bytes and logs when the provider is
// released (499 when the client left first).
void end_request_log(std::shared_ptr<RequestCapture> capture, httplib::Response& res);

// A chat.completion / text_completion object from the `data:` events of an SSE body: per choice
// the concatenated content (or text), reasoning_content and tool calls (arguments concatenated by
// call index), the last finish_reason; the usage chunk's usage; an error event as "error".
nlohmann::json reassemble_sse(const std::string& body);

// logging.request_log_redact: in the row's request and response, every string but the values of a
// few keys that hold no one's words (model, role, object, id, type, finish_reason, adapter names,
// ...) becomes "[redacted: N bytes]", token-id prompts "[redacted: N tokens]", and log-probabilities
// (which spell tokens) "[redacted]"; the rest of the row (route, status, timing, adapters, usage,
// numbers, errors) stays.
void redact_request_log_row(nlohmann::json& row);

}  // namespace kiln
