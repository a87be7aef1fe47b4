#include "eval/synthesize.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace kiln {

using json = nlohmann::json;

std::vector<int64_t> holdout_indices(int64_t n, double fraction, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  if (fraction <= 0) return idx;  // no split: every example
  // Fisher-Yates with our own draws (std::shuffle's use of the engine is implementation-defined),
  // so the split is the same on every standard library.
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
  }
  int64_t k = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n)));
  k = std::clamp<int64_t>(k, fraction > 0 ? 1 : 0, n);
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::optional<FieldError> synthesize_suite(const SynthesizeSpec& spec, const json& examples, const std::string& path,
                                           EvalSuite& out) {
  out = EvalSuite{};
  if (Status st = check_suite_name(spec.name); !st.ok()) return FieldError{"name", st.message()};
  if (!examples.is_array() || examples.empty()) return FieldError{path, "must be a non-empty array of {messages}"};
  out.name = spec.name;
  out.source = "synthesize";
  out.scorer = spec.scorer;
  out.max_tokens = spec.max_tokens;
  out.chat_template_kwargs = spec.chat_template_kwargs;
  const int64_t n = static_cast<int64_t>(examples.size());
  const std::vector<int64_t> keep = holdout_indices(n, spec.holdout_fraction, spec.seed);
  for (int64_t i : keep) {
    const json& e = examples[static_cast<size_t>(i)];
    const std::string p = path + "[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("messages")) return FieldError{p + ".messages", "messages is required"};
    const json& m = e["messages"];
    if (!m.is_array() || m.size() < 2) return FieldError{p + ".messages", "needs a prompt and a final assistant turn"};
    const json& last = m.back();
    if (!last.is_object() || last.value("role", "") != "assistant" || !last.contains("content") ||
        !last["content"].is_string())
      return FieldError{p + ".messages", "the last message must be the assistant's, with string content"};
    EvalExample x;
    x.messages = json(m.begin(), m.end() - 1);
    x.expected = last["content"];
    out.examples.push_back(std::move(x));
  }
  out.holdout = spec.holdout_fraction > 0 ? json{{"fraction", spec.holdout_fraction}, {"seed", spec.seed},
                                                  {"source_examples", n}, {"source_indices", keep}}
                                          : json(nullptr);
  out.created_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (auto err = resolve_scorers(out)) {
    // Name the source example ("examples[7]"), not its index in the suite.
    const std::string& f = err->field;
    if (f.rfind("examples[", 0) == 0) {
      const size_t close = f.find(']');
      const size_t k = std::stoul(f.substr(9, close - 9));
      if (k < keep.size())
        return FieldError{path + "[" + std::to_string(keep[k]) + "]" + f.substr(close + 1), err->message};
    }
    return err;
  }
  return std::nullopt;
}

}  // namespace kiln
