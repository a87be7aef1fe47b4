// PCRE2 compile and bounded matching: each pattern carries a match context with its limits and a
// per-thread JIT stack of the heap limit's size.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/regex.h"

#include <pcre2.h>

#include <utility>

namespace kiln {

static_assert(RegexMatch::kUnset == PCRE2_UNSET);

namespace {

// How much of a pattern an error message quotes: enough to recognise it, not a page of it.
constexpr size_t kQuotedPatternBytes = 160;

std::string grouped(uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string quoted(std::string_view pattern) {
  size_t cut = pattern.size();
  if (cut > kQuotedPatternBytes) {
    cut = kQuotedPatternBytes;
    while (cut > 0 && (static_cast<uint8_t>(pattern[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string out = "'";
  out.append(pattern.substr(0, cut));
  if (cut == pattern.size()) return out += "'";
  return out += "...' (" + grouped(pattern.size()) + " bytes)";
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof(message));
  return reinterpret_cast<const char*>(message);
}

// The JIT's stack for this thread, one per size asked for: a stack serves one match at a time,
// and the matches of one thread never overlap. The last one handed out is kept in plain
// thread-locals, which need no guard, so the usual call is two loads and a compare.
pcre2_jit_stack* thread_jit_stack(void* bytes) {
  const size_t want = *static_cast<const size_t*>(bytes);
  thread_local size_t last_size = 0;
  thread_local pcre2_jit_stack* last_stack = nullptr;
  if (want == last_size) return last_stack;
  struct Stacks {
    std::vector<std::pair<size_t, pcre2_jit_stack*>> by_size;
    ~Stacks() {
      for (auto& [size, stack] : by_size) pcre2_jit_stack_free(stack);
    }
  };
  thread_local Stacks stacks;
  pcre2_jit_stack* found = nullptr;
  for (const auto& [size, stack] : stacks.by_size)
    if (size == want) found = stack;
  if (found == nullptr) {
    found = pcre2_jit_stack_create(want < 32 * 1024 ? want : 32 * 1024, want, nullptr);
    // Null makes PCRE2 use 32 KiB of the machine stack: smaller, still bounded.
    if (found == nullptr) return nullptr;
    stacks.by_size.emplace_back(want, found);
  }
  last_size = want;
  last_stack = found;
  return found;
}

// One pair of offsets serves every span-only match of this thread.
pcre2_match_data* thread_span_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

struct Regex::Compiled {
  std::string pattern;
  RegexLimits limits;
  size_t jit_stack_bytes = 0;
  uint32_t match_options = 0;
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;

  Compiled() = default;
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;
  ~Compiled() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }

  Status match_error(int rc, size_t text_bytes) const {
    const std::string who = "the pattern " + quoted(pattern);
    const std::string on = " on " + grouped(text_bytes) + " bytes of text";
    switch (rc) {
      case PCRE2_ERROR_MATCHLIMIT:
        return resource_exhausted(who + " exceeded its match limit (" + grouped(limits.match_limit) + " steps)" + on);
      case PCRE2_ERROR_DEPTHLIMIT:
        return resource_exhausted(who + " exceeded its depth limit (" + grouped(limits.depth_limit) + ")" + on);
      case PCRE2_ERROR_HEAPLIMIT:
        return resource_exhausted(who + " exceeded its heap limit (" + grouped(limits.heap_limit_kib) + " KiB)" + on);
      case PCRE2_ERROR_JIT_STACKLIMIT:
        return resource_exhausted(who + " exceeded its stack limit (" + grouped(jit_stack_bytes / 1024) + " KiB)" + on);
      case PCRE2_ERROR_NOMEMORY: return resource_exhausted(who + " ran out of memory" + on);
      default: return internal_error(who + " failed" + on + ": " + pcre2_message(rc));
    }
  }
};

std::optional<std::string_view> RegexMatch::group(std::string_view text, size_t i) const {
  if (i >= spans.size() || spans[i].begin == kUnset || spans[i].end < spans[i].begin) return std::nullopt;
  return text.substr(spans[i].begin, spans[i].end - spans[i].begin);
}

const std::string& Regex::pattern() const {
  static const std::string kNone;
  return compiled_ ? compiled_->pattern : kNone;
}

Result<Regex> Regex::compile(std::string_view pattern, const RegexOptions& options) {
  return build(pattern, options, 0);
}

Result<Regex> Regex::literal(std::string_view text, const RegexOptions& options) {
  return build(text, options, PCRE2_LITERAL);
}

Result<Regex> Regex::build(std::string_view pattern, const RegexOptions& options, uint32_t syntax) {
  if (options.limits && pattern.size() > options.limits->max_pattern_bytes)
    return invalid_argument("the pattern " + quoted(pattern) + " is over the cap of " +
                            grouped(options.limits->max_pattern_bytes) + " bytes");
  uint32_t flags = PCRE2_UTF | syntax;
  // PCRE2 refuses UCP with LITERAL, where there is no class or boundary for it to change.
  if (syntax != PCRE2_LITERAL) flags |= PCRE2_UCP;
  if (options.case_mode == RegexCase::kInsensitive) flags |= PCRE2_CASELESS;
  if (options.text == RegexText::kAnyBytes) flags |= PCRE2_MATCH_INVALID_UTF;
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), flags, &error,
                                   &offset, nullptr);
  if (code == nullptr)
    return invalid_argument("the pattern " + quoted(pattern) + " does not compile at offset " + std::to_string(offset) +
                            ": " + pcre2_message(error));
  auto c = std::make_shared<Compiled>();
  c->code = code;
  c->pattern = std::string(pattern);
  c->match_options = options.text == RegexText::kValidUtf8 ? PCRE2_NO_UTF_CHECK : 0;
  // JIT is a speed-up only: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  if (!options.limits) {
    // No context: the limits in force are the library's, which errors still name.
    pcre2_config(PCRE2_CONFIG_MATCHLIMIT, &c->limits.match_limit);
    pcre2_config(PCRE2_CONFIG_DEPTHLIMIT, &c->limits.depth_limit);
    pcre2_config(PCRE2_CONFIG_HEAPLIMIT, &c->limits.heap_limit_kib);
    c->jit_stack_bytes = 32 * 1024;
  } else {
    const RegexLimits& limits = *options.limits;
    c->limits = limits;
    c->jit_stack_bytes = static_cast<size_t>(limits.heap_limit_kib) * 1024;
    c->context = pcre2_match_context_create(nullptr);
    if (c->context == nullptr) return resource_exhausted("no memory for the match context of " + quoted(pattern));
    pcre2_set_match_limit(c->context, limits.match_limit);
    pcre2_set_depth_limit(c->context, limits.depth_limit);
    pcre2_set_heap_limit(c->context, limits.heap_limit_kib);
    pcre2_jit_stack_assign(c->context, thread_jit_stack, &c->jit_stack_bytes);
  }
  Regex r;
  r.compiled_ = std::move(c);
  return r;
}

int Regex::next(std::string_view text, size_t start, size_t* begin, size_t* end) const {
  static_assert(kNoMatch == PCRE2_ERROR_NOMATCH);
  if (!compiled_) return PCRE2_ERROR_NOMATCH;
  pcre2_match_data* md = thread_span_data();
  const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             compiled_->match_options, md, compiled_->context);
  // 0 says the one pair was too few for the groups; the whole match's pair is still set.
  if (rc >= 0) {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    *begin = ov[0];
    *end = ov[1];
  }
  return rc;
}

Status Regex::error(int rc, size_t text_bytes) const { return compiled_->match_error(rc, text_bytes); }

Result<std::optional<RegexMatch>> Regex::find(std::string_view text, size_t start) const {
  if (!compiled_) return std::optional<RegexMatch>();
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  if (!md) return resource_exhausted("no memory for a match of " + quoted(compiled_->pattern));
  const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             compiled_->match_options, md.get(), compiled_->context);
  if (rc == PCRE2_ERROR_NOMATCH) return std::optional<RegexMatch>();
  if (rc < 0) return compiled_->match_error(rc, text.size());
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  RegexMatch m;
  m.spans.resize(pcre2_get_ovector_count(md.get()));
  for (size_t i = 0; i < m.spans.size(); ++i) m.spans[i] = {ov[2 * i], ov[2 * i + 1]};
  return std::optional<RegexMatch>(std::move(m));
}

Result<bool> Regex::full_match(std::string_view text) const {
  if (!compiled_) return false;
  const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             compiled_->match_options | PCRE2_ANCHORED | PCRE2_ENDANCHORED, thread_span_data(),
                             compiled_->context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) return compiled_->match_error(rc, text.size());
  return true;
}

}  // namespace kiln
