#include "server/reasoning_parser.h"

namespace kiln {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

bool prompt_opens_reasoning(std::string_view rendered_prompt) {
  size_t end = rendered_prompt.size();
  while (end > 0 && is_trim_space(rendered_prompt[end - 1])) --end;
  return rendered_prompt.substr(0, end).ends_with(kOpen);
}

ReasoningParser::ReasoningParser(ReasoningStart start)
    : state_(start == ReasoningStart::kInside ? State::kReasoning : State::kBeforeOpen) {}

ReasoningDelta ReasoningParser::feed(std::string_view delta) {
  ReasoningDelta out;
  pending_.append(delta);
  process(out);
  return out;
}

void ReasoningParser::process(ReasoningDelta& out) {
  if (state_ == State::kBeforeOpen) {
    size_t i = 0;
    while (i < pending_.size() && is_trim_space(pending_[i])) ++i;
    const std::string_view rest = std::string_view(pending_).substr(i);
    if (rest.starts_with(kOpen)) {
      pending_.erase(0, i + kOpen.size());
      state_ = State::kReasoning;
    } else if (rest.empty() || kOpen.starts_with(rest)) {
      return;  // whitespace or a partial "<think>": wait
    } else {
      state_ = State::kContent;  // no span: the text is content as it is
    }
  }
  if (state_ == State::kReasoning) {
    const size_t close = pending_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = marker_prefix_suffix(pending_, kClose);
      out.reasoning += reasoning_trim_.feed(std::string_view(pending_).substr(0, pending_.size() - keep));
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    out.reasoning += reasoning_trim_.feed(std::string_view(pending_).substr(0, close));
    reasoning_trim_.end_span();
    pending_.erase(0, close + kClose.size());
    state_ = State::kContent;
    content_after_span_ = true;
  }
  // kContent
  out.content += content_after_span_ ? content_trim_.feed(pending_) : pending_;
  pending_.clear();
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  switch (state_) {
    case State::kBeforeOpen:  // whitespace or a partial "<think>": no span, so content
      out.content = std::move(pending_);
      break;
    case State::kReasoning:  // a partial "</think>" is text of the unclosed span
      out.reasoning = reasoning_trim_.feed(pending_);
      reasoning_trim_.end_span();
      break;
    case State::kContent:
      break;
  }
  pending_.clear();
  return out;
}

}  // namespace kiln
