// Receipts for validator and comparison tests: the committed cpu receipt fixture, bound to the
// bytes of the committed correctness workload, and helpers to derive variants of it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "qualify/receipt.h"
#include "core/sha256.h"
#include "qualify/workload_fixtures.h"

namespace kiln::qualify::testing {

inline std::string digest_of(const std::string& text) { return "sha256:" + sha256_hex(text); }

// The cpu receipt fixture, naming the committed correctness workload's digest.
inline nlohmann::ordered_json cpu_receipt() {
  nlohmann::ordered_json r =
      nlohmann::ordered_json::parse(read_text(std::string(KILN_FIXTURES_DIR) + "/qualify/receipt_correctness_cpu.json"));
  r["workload"]["sha256"] = digest_of(read_text(fixture_path("correctness")));
  return r;
}

// The same run on the cuda variant of an accelerator host.
inline nlohmann::ordered_json cuda_receipt() {
  nlohmann::ordered_json r = cpu_receipt();
  r["receipt_id"] = "fixture-correctness-v1.cuda.20260728t150000z.0a1b2c3e";
  r["qualification"]["backend"] = "cuda";
  r["qualification"]["profile"] = "cuda";
  r["effective_config"]["backend"]["name"] = "cuda";
  r["environment"]["device"] = {{"backend", "cuda"}, {"available", true}, {"count", 1}, {"name", "NVIDIA H200"},
                                {"architecture", "sm_90"}, {"memory_bytes", 150754820096LL}, {"driver", "570.86"}};
  return r;
}

inline Receipt parsed(const nlohmann::ordered_json& j) {
  ReceiptCheck c = check_receipt_text(j.dump());
  return c.receipt;
}

}  // namespace kiln::qualify::testing
