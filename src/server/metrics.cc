#include "server/metrics.h"

#include <cstdio>

#include "backend/fallback.h"

namespace kiln {

namespace {

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += " ";
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += " ";
  out += type;
  out += "\n";
}

void sample(std::string& out, const std::string& name, double v, const std::string& labels = "") {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += fmt(v);
  out += '\n';
}

}  // namespace

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++counts_[i];
  ++count_;
  sum_ += seconds;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string sep = labels.empty() ? "" : labels + ",";
  for (size_t i = 0; i < kBounds.size(); ++i)
    sample(out, name + "_bucket", static_cast<double>(counts_[i]), sep + "le=\"" + fmt(kBounds[i]) + "\"");
  sample(out, name + "_bucket", static_cast<double>(count_), sep + "le=\"+Inf\"");
  sample(out, name + "_sum", sum_, labels);
  sample(out, name + "_count", static_cast<double>(count_), labels);
}

void Metrics::request_finished(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
  latency_[route].observe(seconds);
}

void Metrics::request_refused(const std::string& code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++refused_[code];
}

std::string Metrics::render(const EngineStats& e) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    header(out, "kiln_requests_total", "counter", "HTTP requests answered, by route and status.");
    for (const auto& [key, n] : requests_)
      sample(out, "kiln_requests_total", static_cast<double>(n),
             "route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"");
    header(out, "kiln_request_duration_seconds", "histogram", "Time from request arrival to the last byte, by route.");
    for (const auto& [route, h] : latency_) h.render("kiln_request_duration_seconds", "route=\"" + route + "\"", out);
    header(out, "kiln_requests_refused_total", "counter",
           "Requests refused before routing (host, origin, API key, body framing, size or type), by error code.");
    for (const auto& [code, n] : refused_) sample(out, "kiln_requests_refused_total", static_cast<double>(n), "code=\"" + code + "\"");
  }
  header(out, "kiln_time_to_first_token_seconds", "histogram", "Time from request arrival to its first generated token.");
  ttft_.render("kiln_time_to_first_token_seconds", "", out);
  header(out, "kiln_inter_token_latency_seconds", "histogram", "Time between successive tokens of one choice.");
  itl_.render("kiln_inter_token_latency_seconds", "", out);
  header(out, "kiln_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  sample(out, "kiln_prompt_tokens_total", static_cast<double>(prompt_tokens_.load()));
  header(out, "kiln_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "kiln_generated_tokens_total", static_cast<double>(generated_tokens_.load()));
  header(out, "kiln_request_log_rows_total", "counter",
         "Request-log rows by outcome (dropped: the writer's queue was full).");
  sample(out, "kiln_request_log_rows_total", static_cast<double>(log_rows_queued_.load()), "outcome=\"queued\"");
  sample(out, "kiln_request_log_rows_total", static_cast<double>(log_rows_dropped_.load()), "outcome=\"dropped\"");
  header(out, "kiln_host_fallbacks_total", "counter",
         "Operations a backend declined that ran through the host instead (backend/fallback.h), by backend and "
         "operand count; nonzero only where a backend's policy allows a counted host round trip.");
  const FallbackCounters& fallbacks = FallbackCounters::global();
  for (std::string_view b : FallbackCounters::kBackendNames)
    for (int a = 1; a <= FallbackCounters::kMaxArity; ++a)
      sample(out, "kiln_host_fallbacks_total", static_cast<double>(fallbacks.count(b, a)),
             "backend=\"" + std::string(b) + "\",arity=\"" + std::to_string(a) + "\"");
  header(out, "kiln_requests_active", "gauge", "HTTP inference requests being answered.");
  sample(out, "kiln_requests_active", static_cast<double>(active_.load()));
  header(out, "kiln_queue_depth", "gauge", "Requests waiting for admission by the engine.");
  sample(out, "kiln_queue_depth", static_cast<double>(e.waiting));
  header(out, "kiln_sequences_running", "gauge", "Sequences admitted by the engine (prefilling or decoding).");
  sample(out, "kiln_sequences_running", static_cast<double>(e.running));
  header(out, "kiln_batch_occupancy", "gauge", "Mean decode rows per decode cycle since start, over max_decode_batch.");
  sample(out, "kiln_batch_occupancy",
         e.decode_cycles && e.max_running ? static_cast<double>(e.decode_rows) / static_cast<double>(e.decode_cycles) /
                                                static_cast<double>(e.max_running)
                                          : 0.0);
  header(out, "kiln_decode_rows_total", "counter", "Decode rows over all cycles.");
  sample(out, "kiln_decode_rows_total", static_cast<double>(e.decode_rows));
  header(out, "kiln_decode_cycles_total", "counter", "Engine cycles that decoded at least one row.");
  sample(out, "kiln_decode_cycles_total", static_cast<double>(e.decode_cycles));
  header(out, "kiln_decode_replays_total", "counter",
         "Decode steps replayed as a recorded CUDA graph (0 where the backend runs every step eagerly).");
  sample(out, "kiln_decode_replays_total", static_cast<double>(e.decode_replays));
  header(out, "kiln_decode_recordings", "gauge", "Decode shape buckets recorded as CUDA graphs.");
  sample(out, "kiln_decode_recordings", static_cast<double>(e.decode_recordings));
  header(out, "kiln_decode_adapter_recordings_total", "counter",
         "Decode recordings made for an adapter composition (each padded row's LoRA stack).");
  sample(out, "kiln_decode_adapter_recordings_total", static_cast<double>(e.decode_adapter_recordings));
  header(out, "kiln_decode_recordings_invalidated_total", "counter",
         "Adapter decode recordings dropped: their adapters unloaded or replaced, or evicted.");
  sample(out, "kiln_decode_recordings_invalidated_total", static_cast<double>(e.decode_recordings_invalidated));
  header(out, "kiln_decode_record_failures_total", "counter",
         "Decode recordings that failed: that step ran eagerly, and its composition records again later.");
  sample(out, "kiln_decode_record_failures_total", static_cast<double>(e.decode_record_failures));
  header(out, "kiln_prefill_tokens_total", "counter", "Prompt tokens prefilled (prefix-cache hits excluded).");
  sample(out, "kiln_prefill_tokens_total", static_cast<double>(e.prefill_tokens));
  header(out, "kiln_kv_blocks", "gauge", "64-token K/V blocks by state (cached: held only by the prefix cache).");
  sample(out, "kiln_kv_blocks", static_cast<double>(e.free_blocks), "state=\"free\"");
  sample(out, "kiln_kv_blocks", static_cast<double>(e.total_blocks - e.free_blocks - e.cached_blocks), "state=\"used\"");
  sample(out, "kiln_kv_blocks", static_cast<double>(e.cached_blocks), "state=\"cached\"");
  header(out, "kiln_gdn_slots", "gauge", "GDN state slots by state (cached: prefix-cache snapshots).");
  sample(out, "kiln_gdn_slots", static_cast<double>(e.free_slots), "state=\"free\"");
  sample(out, "kiln_gdn_slots", static_cast<double>(e.total_slots - e.free_slots - e.cached_snapshots), "state=\"used\"");
  sample(out, "kiln_gdn_slots", static_cast<double>(e.cached_snapshots), "state=\"cached\"");
  const GdnSlotCounters& g = e.slot_counters;
  header(out, "kiln_gdn_slot_acquisitions_total", "counter",
         "GDN state slots taken: zeroed for a new sequence, restored from a prefix-cache snapshot into a new "
         "sequence's slot, or a snapshot taken for the prefix cache.");
  sample(out, "kiln_gdn_slot_acquisitions_total", static_cast<double>(g.acquisitions), "kind=\"zeroed\"");
  sample(out, "kiln_gdn_slot_acquisitions_total", static_cast<double>(g.restores), "kind=\"restored\"");
  sample(out, "kiln_gdn_slot_acquisitions_total", static_cast<double>(g.snapshots), "kind=\"snapshot\"");
  header(out, "kiln_gdn_slot_releases_total", "counter",
         "GDN state slots given back: by sequences (finished, cancelled or not admitted) and by the prefix cache "
         "(snapshots evicted).");
  sample(out, "kiln_gdn_slot_releases_total", static_cast<double>(g.sequence_releases), "by=\"sequence\"");
  sample(out, "kiln_gdn_slot_releases_total", static_cast<double>(g.cache_releases), "by=\"prefix_cache\"");
  header(out, "kiln_gdn_slot_failures_total", "counter",
         "GDN slot acquisitions, restores or snapshots that found no free slot or failed on the device.");
  sample(out, "kiln_gdn_slot_failures_total", static_cast<double>(g.failures));
  header(out, "kiln_prefix_cache_hits_total", "counter", "Admissions that resumed from a cached prefix.");
  sample(out, "kiln_prefix_cache_hits_total", static_cast<double>(e.prefix_hits));
  header(out, "kiln_prefix_cache_misses_total", "counter", "Admissions that found no cached prefix.");
  sample(out, "kiln_prefix_cache_misses_total", static_cast<double>(e.prefix_misses));
  return out;
}

}  // namespace kiln
