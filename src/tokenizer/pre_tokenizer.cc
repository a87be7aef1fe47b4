// Each step maps every current piece to sub-pieces, as in the tokenizers library; empty pieces
// are dropped.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kiln {
namespace {

// The regex the ByteLevel pre-tokenizer uses when use_regex is true (GPT-2's).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<SplitBehavior> parse_behavior(const nlohmann::json& j) {
  if (!j.is_string()) return format_error("pre_tokenizer Split: \"behavior\" must be a string");
  const std::string b = j;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported("pre_tokenizer Split behavior \"" + b + "\" is not supported");
}

// A limit hit by the tokenizer's own patterns: stopping beats silently tokenising the rest of the
// text differently.
void check_split(const Status& st) {
  if (st.ok()) return;
  std::fprintf(stderr, "kiln: pre-tokenizer: %s\n", st.message().c_str());
  std::abort();
}

bool flag(const nlohmann::json& config, const char* key, bool fallback) {
  return config.contains(key) && config[key].is_boolean() ? config[key].get<bool>() : fallback;
}

}  // namespace

Status PreTokenizer::add_steps(const nlohmann::json& config, PreTokenizer& out, bool last) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return format_error("pre_tokenizer: expected an object with a string \"type\"");
  }
  const std::string type = config["type"];
  if (out.byte_level_) {
    return unsupported("pre_tokenizer " + type + " after ByteLevel is not supported (ByteLevel must come last)");
  }
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array()) {
      return format_error("pre_tokenizer Sequence: expected an array \"pretokenizers\"");
    }
    const auto& inner = config["pretokenizers"];
    for (size_t i = 0; i < inner.size(); ++i) {
      KILN_RETURN_IF_ERROR(add_steps(inner[i], out, last && i + 1 == inner.size()));
    }
    return {};
  }
  if (type == "Split") {
    Step step{Step::Kind::kSplit, {}, SplitBehavior::kIsolated, flag(config, "invert", false)};
    if (!config.contains("pattern") || !config["pattern"].is_object()) {
      return format_error("pre_tokenizer Split: expected an object \"pattern\"");
    }
    const auto& pattern = config["pattern"];
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      KILN_ASSIGN_OR_RETURN(step.regex, compile_tokenizer_pattern(pattern["Regex"].get<std::string>()));
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      KILN_ASSIGN_OR_RETURN(step.regex, compile_tokenizer_literal(pattern["String"].get<std::string>()));
    } else {
      return format_error("pre_tokenizer Split: \"pattern\" needs a string \"Regex\" or \"String\"");
    }
    KILN_ASSIGN_OR_RETURN(step.behavior, parse_behavior(config.value("behavior", nlohmann::json())));
    out.steps_.push_back(std::move(step));
    return {};
  }
  if (type == "ByteLevel") {
    if (!last) return unsupported("pre_tokenizer ByteLevel followed by other pre-tokenizers is not supported");
    if (flag(config, "add_prefix_space", false)) {
      out.steps_.push_back(Step{Step::Kind::kByteLevelPrefix, {}, SplitBehavior::kIsolated, false});
    }
    if (flag(config, "use_regex", true)) {
      KILN_ASSIGN_OR_RETURN(Regex regex, compile_tokenizer_pattern(kGpt2Pattern));
      out.steps_.push_back(Step{Step::Kind::kSplit, std::move(regex), SplitBehavior::kIsolated, false});
    }
    out.byte_level_ = true;
    return {};
  }
  return unsupported("pre_tokenizer type \"" + type + "\" is not supported (supported: Sequence, Split, ByteLevel)");
}

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& config) {
  PreTokenizer p;
  if (config.is_null()) return p;
  KILN_RETURN_IF_ERROR(add_steps(config, p, true));
  return p;
}

void PreTokenizer::apply(const Step& step, std::string_view piece, std::vector<std::string_view>& out,
                         std::deque<std::string>& owned) const {
  if (step.kind == Step::Kind::kByteLevelPrefix) {
    if (!piece.empty() && piece.front() == ' ') {
      out.push_back(piece);
    } else {
      std::string& prefixed = owned.emplace_back();
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      out.push_back(prefixed);
    }
    return;
  }
  // The fast path for the common case: Isolated, not inverted, every span is a word.
  if (step.behavior == SplitBehavior::kIsolated) {
    size_t prev = 0;
    check_split(step.regex.for_each_match(piece, [&](size_t b, size_t e) {
      if (b > prev) out.push_back(piece.substr(prev, b - prev));
      if (e > b) out.push_back(piece.substr(b, e - b));
      prev = e;
    }));
    if (prev < piece.size()) out.push_back(piece.substr(prev));
    return;
  }
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  check_split(step.regex.for_each_match(piece, [&](size_t b, size_t e) {
    if (b > prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }));
  if (prev < piece.size() || piece.empty()) spans.push_back({prev, piece.size(), false});
  if (step.invert) {
    for (auto& s : spans) s.is_match = !s.is_match;
  }
  std::vector<Span> merged;
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      merged = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : spans) {
        if (!s.is_match) merged.push_back(s);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !merged.empty()) merged.back().end = s.end;
        else merged.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) merged.back().begin = it->begin;
        else merged.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !merged.empty()) merged.back().end = s.end;
        else merged.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  for (const auto& s : merged) {
    if (s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words,
                         std::deque<std::string>& owned) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    words.push_back(text);
    return;
  }
  std::vector<std::string_view> current{text}, next;
  for (size_t i = 0; i < steps_.size(); ++i) {
    std::vector<std::string_view>& target = i + 1 == steps_.size() ? words : next;
    for (std::string_view piece : current) apply(steps_[i], piece, target, owned);
    if (i + 1 < steps_.size()) {
      current.swap(next);
      next.clear();
    }
  }
}

}  // namespace kiln
