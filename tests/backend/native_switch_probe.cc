// native_switch_probe BACKEND: what the switch audit (tests/backend/switch_audit.h) compares
// between runs under different environments. On BACKEND it prints, as one JSON object: the
// support audit's answer for every facet method (report/support_audit.h), and the host fallbacks
// counted while the engine serves the gqa_untied fixture a greedy and a sampled request.
// Exit 0 with the object; 2 with {"error": ...} when the backend or a step fails.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/fallback.h"
#include "backend/registry.h"
#include "engine/engine.h"
#include "model/qwen35.h"
#include "report/support_audit.h"

namespace {

using nlohmann::json;

int fail(const std::string& what) {
  std::printf("%s\n", json{{"error", what}}.dump().c_str());
  return 2;
}

kiln::RequestSpec request(float temperature, uint64_t seed) {
  kiln::RequestSpec r;
  for (int i = 0; i < 24; ++i) r.prompt.push_back((i * 31 + 3) % 300);
  r.max_tokens = 8;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.logprobs = false;
  r.seed = seed;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 2) return fail("usage: native_switch_probe BACKEND");
  const std::string name = argv[1];
  auto created = create_backend(name);
  if (!created.ok()) return fail(created.status().to_string());
  Backend& be = *created.value();
  json out = {{"backend", name}, {"device", be.identity().device_name}, {"audit", json::array()}};
  int mismatches = 0;
  for (const AuditRow& row : audit_support(be)) {
    out["audit"].push_back({{"facet", row.facet}, {"request", row.request},
                            {"support", std::string(support_state_name(row.support.state))}, {"mismatch", row.mismatch}});
    mismatches += row.mismatch;
  }
  out["mismatches"] = mismatches;
  const uint64_t before = FallbackCounters::global().total(name);
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", be);
  if (!model.ok()) return fail(model.status().to_string());
  EngineConfig ec;
  ec.kv_blocks = 16;
  auto engine = Engine::create(**model, ec);
  if (!engine.ok()) return fail(engine.status().to_string());
  std::vector<Submission> subs;
  for (const RequestSpec& r : {request(0.f, 1), request(0.8f, 2)}) {
    auto sub = (*engine)->submit(r);
    if (!sub.ok()) return fail(sub.status().to_string());
    subs.push_back(*sub);
  }
  while ((*engine)->has_work())
    if (auto r = (*engine)->step(); !r.ok()) return fail(r.status().to_string());
  json tokens = json::array();
  for (Submission& s : subs) {
    json row = json::array();
    while (auto e = s.channel->try_pop()) {
      if (e->finish == FinishReason::kError) return fail(e->error);
      if (e->token >= 0) row.push_back(e->token);
    }
    tokens.push_back(row);
  }
  out["tokens"] = tokens;
  out["host_fallbacks"] = FallbackCounters::global().total(name) - before;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
