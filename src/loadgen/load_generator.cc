#include "loadgen/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

namespace kiln::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

struct SplitUrl {
  std::string scheme_host_port;  // what httplib::Client takes
  std::string path_prefix;       // "" or "/prefix" without a trailing slash
};

Result<SplitUrl> split_base_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos || url.substr(0, scheme_end) != "http") {
    return invalid_argument("base URL \"" + url + "\" must start with http://");
  }
  const size_t path = url.find('/', scheme_end + 3);
  SplitUrl s{url.substr(0, path), path == std::string::npos ? "" : url.substr(path)};
  while (!s.path_prefix.empty() && s.path_prefix.back() == '/') s.path_prefix.pop_back();
  if (s.scheme_host_port.size() == scheme_end + 3) return invalid_argument("base URL \"" + url + "\" names no host");
  return s;
}

Status check_spec(const LoadSpec& spec) {
  if (spec.concurrency < 1) return invalid_argument("concurrency must be at least 1, got " + std::to_string(spec.concurrency));
  if (spec.requests < 0) return invalid_argument("requests must not be negative, got " + std::to_string(spec.requests));
  if (!(spec.duration_s >= 0) || !std::isfinite(spec.duration_s)) {
    return invalid_argument("duration must be a finite number of seconds >= 0, got " + std::to_string(spec.duration_s));
  }
  if (spec.max_tokens < 1) return invalid_argument("max_tokens must be at least 1, got " + std::to_string(spec.max_tokens));
  if (!(spec.temperature >= 0)) return invalid_argument("temperature must be >= 0, got " + std::to_string(spec.temperature));
  if (!(spec.request_timeout_s > 0)) return invalid_argument("request timeout must be positive");
  return {};
}

void set_timeout(httplib::Client& client, double seconds) {
  const time_t sec = static_cast<time_t>(seconds);
  const time_t usec = static_cast<time_t>((seconds - static_cast<double>(sec)) * 1e6);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
}

// Fills the aggregate fields from the records.
void aggregate(LoadResult& r) {
  std::sort(r.records.begin(), r.records.end(), [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  std::vector<double> ttft, itl;
  r.requests = static_cast<int64_t>(r.records.size());
  for (const RequestRecord& rec : r.records) {
    if (!rec.ok()) {
      if (r.errors++ == 0) r.first_error = "request " + std::to_string(rec.index) + " (prompt " + rec.prompt_id + "): " + rec.error;
      continue;
    }
    if (rec.disconnected) {
      ++r.disconnected;
      continue;
    }
    r.output_tokens += rec.output_tokens;
    if (rec.output_tokens == 0) ++r.requests_without_tokens;
    if (rec.ttft_ms >= 0) ttft.push_back(rec.ttft_ms);
    itl.insert(itl.end(), rec.inter_token_ms.begin(), rec.inter_token_ms.end());
  }
  r.ttft_ms = summarize(ttft);
  r.inter_token_latency_ms = summarize(itl);
}

}  // namespace

int64_t default_request_count(int64_t prompts, int64_t concurrency) {
  const int64_t rounded = (prompts + concurrency - 1) / concurrency * concurrency;
  return std::max(rounded, 2 * concurrency);
}

double LoadResult::requests_per_second() const {
  return duration_s > 0 ? static_cast<double>(requests - errors - disconnected) / duration_s : 0;
}

double LoadResult::output_tokens_per_second() const {
  return duration_s > 0 ? static_cast<double>(output_tokens) / duration_s : 0;
}

Result<LoadResult> run_load(const LoadSpec& spec, const PromptSet& prompts) {
  KILN_RETURN_IF_ERROR(check_spec(spec));
  if (prompts.prompts.empty()) return invalid_argument("prompt set \"" + prompts.name + "\" has no prompts");
  KILN_ASSIGN_OR_RETURN(SplitUrl url, split_base_url(spec.base_url));
  {
    httplib::Client probe(url.scheme_host_port);
    if (!probe.is_valid()) return invalid_argument("base URL \"" + spec.base_url + "\" is not a usable http URL");
  }

  const int64_t n_prompts = static_cast<int64_t>(prompts.prompts.size());
  int64_t limit = spec.requests;
  if (limit == 0) {
    limit = spec.duration_s > 0 ? std::numeric_limits<int64_t>::max() : default_request_count(n_prompts, spec.concurrency);
  }
  const bool timed = spec.duration_s > 0;

  std::atomic<int64_t> next{0};
  std::mutex mu;  // guards records, done and the callback
  LoadResult result;
  result.concurrency = spec.concurrency;
  int64_t done = 0;

  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.duration_s));
  auto client_thread = [&] {
    httplib::Client client(url.scheme_host_port);
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);  // headers and body go out as two writes: no Nagle delay between them
    client.set_connection_timeout(10, 0);
    set_timeout(client, spec.request_timeout_s);
    if (!spec.api_key.empty()) client.set_bearer_token_auth(spec.api_key);
    for (;;) {
      if (timed && Clock::now() >= deadline) return;
      const int64_t i = next.fetch_add(1);
      if (i >= limit) return;
      const Prompt& p = prompts.prompts[static_cast<size_t>(i % n_prompts)];
      ChatRequest req;
      req.path = url.path_prefix + "/v1/chat/completions";
      req.model = spec.model;
      req.messages = &p.messages;
      req.max_tokens = p.max_tokens.value_or(spec.max_tokens);
      req.seed = spec.seed + static_cast<uint64_t>(i);
      req.temperature = spec.temperature;
      if (spec.shape_request) spec.shape_request(i, req);
      const double start_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      RequestRecord rec = stream_chat_completion(client, req);
      rec.start_ms = start_ms;
      rec.index = i;
      rec.prompt_id = p.id;
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (spec.on_request_done) spec.on_request_done(rec, done);
      result.records.push_back(std::move(rec));
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(spec.concurrency));
  for (int64_t t = 0; t < spec.concurrency; ++t) threads.emplace_back(client_thread);
  for (std::thread& t : threads) t.join();
  result.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  aggregate(result);
  return result;
}

nlohmann::json load_result_json(const LoadResult& r) {
  return {{"concurrency", r.concurrency},
          {"requests", r.requests},
          {"errors", r.errors},
          {"disconnected", r.disconnected},
          {"requests_without_tokens", r.requests_without_tokens},
          {"duration_s", r.duration_s},
          {"requests_per_second", r.requests_per_second()},
          {"output_tokens", r.output_tokens},
          {"output_tokens_per_second", r.output_tokens_per_second()},
          {"ttft_ms", summary_json(r.ttft_ms)},
          {"inter_token_latency_ms", summary_json(r.inter_token_latency_ms)},
          {"first_error", r.first_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.first_error)}};
}

}  // namespace kiln::loadgen
