// The tiny reference model (tests/fixtures/reference/gqa_untied: 4 layers, 3 GDN + 1 attention,
// vocabulary 300) on the CPU backend, shared by the engine tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/qwen35.h"

namespace kiln::testing {

struct TinyModel {
  std::unique_ptr<Backend> backend = std::move(create_backend("cpu").value());
  std::unique_ptr<Qwen35Model> model =
      std::move(Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *backend).value());
};

// A deterministic prompt of `n` tokens; `salt` makes different prompts.
inline std::vector<int32_t> prompt_of(int n, int salt = 0) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + 11 + salt * 101) % 300);
  return p;
}

}  // namespace kiln::testing
