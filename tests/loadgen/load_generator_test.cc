// The load generator against a fake streaming server: request counts and seeds, token counts,
// timing lower bounds implied by the fake's sleeps, and every kind of error.
#include "loadgen/load_generator.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include "fake_chat_server.h"

namespace kiln::loadgen {
namespace {

using testing::FakeChatServer;

PromptSet three_prompts() {
  PromptSet set;
  set.name = "three";
  for (const char* id : {"p1", "p2", "p3"}) {
    set.prompts.push_back({id, nlohmann::json::array({{{"role", "user"}, {"content", std::string("say ") + id}}}), std::nullopt});
  }
  return set;
}

LoadSpec spec_for(const FakeChatServer& server, const std::string& model, int64_t concurrency) {
  LoadSpec spec;
  spec.base_url = server.base_url();
  spec.model = model;
  spec.concurrency = concurrency;
  spec.max_tokens = 7;
  spec.seed = 100;
  spec.request_timeout_s = 10;
  return spec;
}

TEST(LoadGenerator, DefaultRequestCountRoundsUpToConcurrencyAndAtLeastTwice) {
  EXPECT_EQ(default_request_count(3, 2), 4);
  EXPECT_EQ(default_request_count(3, 4), 8);
  EXPECT_EQ(default_request_count(64, 1), 64);
  EXPECT_EQ(default_request_count(64, 8), 64);
  EXPECT_EQ(default_request_count(64, 64), 128);
  EXPECT_EQ(default_request_count(65, 8), 72);
}

TEST(LoadGenerator, StreamsEveryRequestAndCountsTokensAndLatencies) {
  FakeChatServer server({.first_delay_ms = 50, .gap_ms = 10, .chunks = 5});
  PromptSet prompts = three_prompts();
  Result<LoadResult> r = run_load(spec_for(server, "fake", 2), prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->concurrency, 2);
  EXPECT_EQ(r->requests, 4);  // 3 prompts rounded up to a multiple of 2, and at least 2 * 2
  EXPECT_EQ(r->errors, 0) << r->first_error;
  EXPECT_EQ(r->first_error, "");
  EXPECT_EQ(r->output_tokens, 20);
  EXPECT_EQ(r->requests_without_tokens, 0);
  EXPECT_EQ(r->ttft_ms.count, 4);
  EXPECT_EQ(r->inter_token_latency_ms.count, 4 * 4);  // 4 gaps between 5 chunks, per request
  EXPECT_GE(r->ttft_ms.p50, 50.0);
  EXPECT_GE(r->ttft_ms.min, 50.0);
  EXPECT_GT(r->duration_s, 0.09);  // at least one request's sleeps: 50 + 4 * 10 ms
  EXPECT_NEAR(r->output_tokens_per_second(), 20 / r->duration_s, 1e-9);
  EXPECT_NEAR(r->requests_per_second(), 4 / r->duration_s, 1e-9);
  ASSERT_EQ(r->records.size(), 4u);
  for (size_t i = 0; i < r->records.size(); ++i) {
    const RequestRecord& rec = r->records[i];
    EXPECT_EQ(rec.index, static_cast<int64_t>(i));
    EXPECT_EQ(rec.http_status, 200);
    EXPECT_TRUE(rec.usage_reported);
    EXPECT_EQ(rec.content_chunks, 5);
    // The last chunk is written 90 ms after the request arrived: it cannot be seen sooner.
    double last_chunk_ms = rec.ttft_ms;
    for (double gap : rec.inter_token_ms) last_chunk_ms += gap;
    EXPECT_GE(last_chunk_ms, 90.0) << "request " << i;
    EXPECT_GE(rec.latency_ms, last_chunk_ms);
  }
  EXPECT_EQ(r->records[0].prompt_id, "p1");
  EXPECT_EQ(r->records[3].prompt_id, "p1");  // request i sends prompt i mod 3

  // What went over the wire: streaming with usage, max_tokens, temperature 0, seeds seed + i.
  std::vector<nlohmann::json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 4u);
  std::multiset<uint64_t> seeds;
  for (const nlohmann::json& b : bodies) {
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_EQ(b["max_tokens"], 7);
    EXPECT_EQ(b["temperature"], 0.0);
    EXPECT_EQ(b["model"], "fake");
    seeds.insert(b["seed"].get<uint64_t>());
  }
  EXPECT_EQ(seeds, (std::multiset<uint64_t>{100, 101, 102, 103}));

  nlohmann::json j = load_result_json(*r);
  EXPECT_EQ(j["requests"], 4);
  EXPECT_EQ(j["output_tokens"], 20);
  EXPECT_TRUE(j["first_error"].is_null());
  EXPECT_GE(j["ttft_ms"]["p99"].get<double>(), 50.0);
  for (const char* key : {"concurrency", "errors", "duration_s", "requests_per_second", "output_tokens_per_second",
                          "inter_token_latency_ms"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

TEST(LoadGenerator, ExplicitRequestCountAndPromptMaxTokens) {
  FakeChatServer server({.first_delay_ms = 0, .gap_ms = 0, .chunks = 2});
  PromptSet prompts = three_prompts();
  prompts.prompts[1].max_tokens = 3;
  LoadSpec spec = spec_for(server, "fake", 3);
  spec.requests = 5;
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->requests, 5);
  EXPECT_EQ(r->output_tokens, 10);
  std::multiset<int64_t> max_tokens;
  for (const nlohmann::json& b : server.bodies()) max_tokens.insert(b["max_tokens"].get<int64_t>());
  EXPECT_EQ(max_tokens, (std::multiset<int64_t>{7, 7, 7, 3, 3}));  // requests 1 and 4 send prompt p2
}

TEST(LoadGenerator, WithoutUsageCountsContentChunks) {
  FakeChatServer server({.first_delay_ms = 0, .gap_ms = 1, .chunks = 6});
  PromptSet prompts = three_prompts();
  Result<LoadResult> r = run_load(spec_for(server, "fake-no-usage", 1), prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->requests, 3);
  EXPECT_EQ(r->errors, 0) << r->first_error;
  EXPECT_EQ(r->output_tokens, 18);
  for (const RequestRecord& rec : r->records) EXPECT_FALSE(rec.usage_reported);
}

TEST(LoadGenerator, ChunkOfSeveralTokensDividesItsGap) {
  FakeChatServer server({.first_delay_ms = 0, .gap_ms = 20, .chunks = 3});
  PromptSet prompts = three_prompts();
  LoadSpec spec = spec_for(server, "fake-pairs", 1);
  spec.requests = 1;
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->errors, 0) << r->first_error;
  const RequestRecord& rec = r->records[0];
  EXPECT_EQ(rec.output_tokens, 6);
  EXPECT_EQ(rec.content_chunks, 3);
  ASSERT_EQ(rec.inter_token_ms.size(), 4u);  // chunks 2 and 3 carry two tokens each
  EXPECT_EQ(rec.inter_token_ms[0], rec.inter_token_ms[1]);  // one gap, halved, recorded twice
  EXPECT_EQ(rec.inter_token_ms[2], rec.inter_token_ms[3]);
}

TEST(LoadGenerator, Http503IsAnErrorWithItsStatus) {
  FakeChatServer server({});
  PromptSet prompts = three_prompts();
  Result<LoadResult> r = run_load(spec_for(server, "fake-503", 2), prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->requests, 4);
  EXPECT_EQ(r->errors, 4);
  EXPECT_EQ(r->output_tokens, 0);
  EXPECT_EQ(r->ttft_ms.count, 0);
  EXPECT_EQ(r->requests_per_second(), 0.0);
  EXPECT_EQ(r->first_error, "request 0 (prompt p1): HTTP 503: queue full");
  for (const RequestRecord& rec : r->records) EXPECT_EQ(rec.http_status, 503);
  nlohmann::json j = load_result_json(*r);
  EXPECT_TRUE(j["ttft_ms"]["p50"].is_null());
  EXPECT_EQ(j["first_error"], "request 0 (prompt p1): HTTP 503: queue full");
}

TEST(LoadGenerator, ErrorObjectInTheStreamIsAnError) {
  FakeChatServer server({.first_delay_ms = 0, .gap_ms = 0, .chunks = 3});
  PromptSet prompts = three_prompts();
  LoadSpec spec = spec_for(server, "fake-error", 1);
  spec.requests = 2;
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->errors, 2);
  EXPECT_EQ(r->first_error, "request 0 (prompt p1): error in stream: engine failed");
}

// Reading the chunk whole and printing its error used to recurse 200,000 levels deep.
TEST(LoadGenerator, ChunkNestedPastTheJsonLimitIsAnErrorNamingIt) {
  FakeChatServer server({.first_delay_ms = 0, .gap_ms = 0, .chunks = 1});
  PromptSet prompts = three_prompts();
  LoadSpec spec = spec_for(server, "fake-deep", 1);
  spec.requests = 1;
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->errors, 1);
  EXPECT_EQ(r->first_error.rfind("request 0 (prompt p1): stream chunk nests deeper than 64 levels (byte 73)", 0), 0u)
      << r->first_error.substr(0, 300);
}

TEST(LoadGenerator, StreamWithoutDoneIsAnError) {
  FakeChatServer server({.first_delay_ms = 0, .gap_ms = 0, .chunks = 2});
  PromptSet prompts = three_prompts();
  LoadSpec spec = spec_for(server, "fake-no-done", 1);
  spec.requests = 1;
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->errors, 1);
  EXPECT_NE(r->first_error.find("without data: [DONE]"), std::string::npos) << r->first_error;
}

TEST(LoadGenerator, UnreachableServerIsATransportError) {
  // A port that was free a moment ago and has nothing listening on it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  const int port = ntohs(addr.sin_port);
  LoadSpec spec;
  spec.base_url = "http://127.0.0.1:" + std::to_string(port);
  spec.model = "fake";
  spec.requests = 2;
  spec.request_timeout_s = 2;
  PromptSet prompts = three_prompts();
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->errors, 2);
  EXPECT_NE(r->first_error.find("transport error"), std::string::npos) << r->first_error;
  EXPECT_EQ(r->records[0].http_status, 0);
}

TEST(LoadGenerator, DurationBoundsTheRun) {
  FakeChatServer server({.first_delay_ms = 20, .gap_ms = 5, .chunks = 3});
  PromptSet prompts = three_prompts();
  LoadSpec spec = spec_for(server, "fake", 2);
  spec.duration_s = 0.3;
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GE(r->duration_s, 0.3);  // each thread runs until it sees the deadline pass
  EXPECT_GE(r->requests, 2);
  EXPECT_EQ(r->errors, 0) << r->first_error;
  EXPECT_EQ(r->output_tokens, 3 * r->requests);
}

TEST(LoadGenerator, RefusesAnUnusableSpecNamingTheField) {
  PromptSet prompts = three_prompts();
  LoadSpec spec;
  spec.base_url = "http://127.0.0.1:1";
  spec.concurrency = 0;
  Result<LoadResult> r = run_load(spec, prompts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("concurrency"), std::string::npos);
  spec.concurrency = 1;
  spec.max_tokens = 0;
  r = run_load(spec, prompts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_tokens"), std::string::npos);
  spec.max_tokens = 1;
  spec.base_url = "ftp://example";
  r = run_load(spec, prompts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ftp://example"), std::string::npos);
  spec.base_url = "http://127.0.0.1:1";
  r = run_load(spec, PromptSet{"empty", {}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty"), std::string::npos);
}

}  // namespace
}  // namespace kiln::loadgen
