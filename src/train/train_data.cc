// SFT conversations and GRPO groups (the training API's JSON) -> TrainSequences, through the
// model's chat template and tokenizer. Spans are found on the rendered text and each span is
// tokenized on its own, so the tokens of a prompt are exactly those inference would see for it.
#include "train/train_data.h"
#include "core/json_text.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>

namespace kiln {

namespace {

using Json = nlohmann::ordered_json;

Status field_error(const std::string& path, const std::string& what) { return invalid_argument(path + ": " + what); }

Status check_keys(const Json& obj, const std::string& path, std::initializer_list<const char*> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) return field_error(path + "." + it.key(), "unknown field");
  }
  return {};
}

// `messages`: a non-empty array of objects with string `role` and `content`; other keys of a
// message (reasoning_content, tool_calls, ...) are the template's to read.
Status check_messages(const Json& parent, const std::string& path) {
  if (!parent.contains("messages")) return field_error(path + ".messages", "is missing");
  const Json& msgs = parent["messages"];
  if (!msgs.is_array() || msgs.empty()) return field_error(path + ".messages", "must be a non-empty array of messages");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string at = path + ".messages[" + std::to_string(i) + "]";
    if (!msgs[i].is_object()) return field_error(at, "must be an object with role and content");
    if (!msgs[i].contains("role") || !msgs[i]["role"].is_string()) return field_error(at + ".role", "must be a string");
    if (!msgs[i].contains("content") || !msgs[i]["content"].is_string())
      return field_error(at + ".content", "must be a string");
  }
  return {};
}

Result<std::string> render(const TrainDataContext& ctx, const Json& messages, GenerationPrompt gp, const Json& vars,
                           const std::string& path) {
  ChatTemplateRequest req;
  req.messages = messages;
  req.generation_prompt = gp;
  req.variables = vars;
  auto r = ctx.chat_template->render(req);
  if (!r.ok()) return field_error(path, "the chat template refused the messages: " + r.status().message());
  return r;
}

// Appends the tokens of `text` with one role.
void append(const TrainDataContext& ctx, std::string_view text, TokenRole role, TrainSequence& seq) {
  if (text.empty()) return;
  for (TokenId id : ctx.tokenizer->encode(text)) {
    seq.tokens.push_back(static_cast<int32_t>(id));
    seq.roles.push_back(role);
  }
}

// The sequence cut to ctx.max_seq_length (its end goes), then checked against the context.
Status fit_length(TrainSequence& seq, const TrainDataContext& ctx, const std::string& path) {
  if (const size_t most = static_cast<size_t>(ctx.max_seq_length); most > 0 && seq.tokens.size() > most) {
    const auto first = std::find(seq.roles.begin() + 1, seq.roles.end(), TokenRole::kTarget);
    if (first - seq.roles.begin() >= static_cast<std::ptrdiff_t>(most))
      return field_error(path, "its first target token is token " + std::to_string(first - seq.roles.begin()) + " of " +
                                   std::to_string(seq.tokens.size()) + ": config.max_seq_length " +
                                   std::to_string(most) + " cuts every target token");
    seq.tokens.resize(most);
    seq.roles.resize(most);
  }
  if (seq.tokens.size() < 2) return field_error(path, "has fewer than 2 tokens: nothing to predict");
  if (ctx.max_tokens > 0 && static_cast<int64_t>(seq.tokens.size()) > ctx.max_tokens)
    return field_error(path, std::to_string(seq.tokens.size()) + " tokens is longer than the context limit of " +
                                 std::to_string(ctx.max_tokens));
  return {};
}

Status check_context(const TrainDataContext& ctx) {
  if (!ctx.tokenizer || !ctx.chat_template) return failed_precondition("training data needs the model's tokenizer and chat template");
  if (ctx.end_of_turn.empty()) return failed_precondition("training data needs the end-of-turn token's text");
  return {};
}

// The lines of a JSONL file, each parsed, with its "path:line" name.
Result<std::vector<std::pair<std::string, Json>>> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot be opened");
  std::vector<std::pair<std::string, Json>> rows;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    auto j = parse_json(line, where);
    if (!j.ok()) return format_error(j.status().message());
    rows.emplace_back(where, std::move(*j));
  }
  if (rows.empty()) return invalid_argument(path + ": no lines with data");
  return rows;
}

}  // namespace

Result<TrainSequence> sft_sequence(const Json& example, const std::string& where, const TrainDataContext& ctx) {
  KILN_RETURN_IF_ERROR(check_context(ctx));
  if (!example.is_object()) return field_error(where, "must be an object with messages");
  KILN_RETURN_IF_ERROR(check_keys(example, where, {"messages"}));
  KILN_RETURN_IF_ERROR(check_messages(example, where));
  const Json& msgs = example["messages"];
  std::vector<size_t> turns;
  for (size_t i = 0; i < msgs.size(); ++i)
    if (msgs[i]["role"] == "assistant") turns.push_back(i);
  if (turns.empty()) return field_error(where + ".messages", "has no assistant turn: nothing to train on");

  KILN_ASSIGN_OR_RETURN(const std::string whole, render(ctx, msgs, GenerationPrompt::kOmit, Json::object(), where + ".messages"));
  // Each assistant turn starts where the conversation before it, rendered with the generation
  // prompt, ends. Templates differ in what that prompt holds for a plain answer (Qwen3 writes an
  // empty think block for the last turn only, and enable_thinking=false asks for it): the longest
  // variant that is a prefix of the whole rendering wins, so the target is the answer itself.
  const Json variants[] = {Json{{"enable_thinking", false}}, Json{{"enable_thinking", true}}, Json::object()};
  TrainSequence seq;
  size_t done = 0;  // characters of `whole` already turned into tokens
  for (size_t k : turns) {
    const std::string at = where + ".messages[" + std::to_string(k) + "]";
    Json before = Json::array();
    for (size_t i = 0; i < k; ++i) before.push_back(msgs[i]);
    size_t start = std::string::npos;
    for (const Json& vars : variants) {
      KILN_ASSIGN_OR_RETURN(const std::string prompt, render(ctx, before, GenerationPrompt::kAdd, vars, at));
      if (whole.compare(0, prompt.size(), prompt) == 0 && (start == std::string::npos || prompt.size() > start))
        start = prompt.size();
    }
    if (start == std::string::npos)
      return field_error(at, "the chat template breaks the prefix property: the conversation before this assistant turn, "
                             "rendered with the generation prompt, is not a prefix of the whole conversation's rendering");
    if (start < done) return field_error(at, "the chat template renders this assistant turn inside the one before it");
    const size_t close = whole.find(ctx.end_of_turn, start);
    if (close == std::string::npos)
      return field_error(at, "the chat template does not end this assistant turn with " + ctx.end_of_turn);
    const size_t end = close + ctx.end_of_turn.size();
    append(ctx, std::string_view(whole).substr(done, start - done), TokenRole::kContext, seq);
    append(ctx, std::string_view(whole).substr(start, end - start), TokenRole::kTarget, seq);
    done = end;
  }
  // What follows the last target (the template's newline) is predicted by nothing: left out.
  KILN_RETURN_IF_ERROR(fit_length(seq, ctx, where));
  return seq;
}

Result<std::vector<TrainSequence>> sft_sequences(const Json& examples, const TrainDataContext& ctx) {
  if (!examples.is_array() || examples.empty()) return field_error("examples", "must be a non-empty array of conversations");
  std::vector<TrainSequence> out;
  for (size_t i = 0; i < examples.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(TrainSequence s, sft_sequence(examples[i], "examples[" + std::to_string(i) + "]", ctx));
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<TrainSequence>> sft_sequences_from_jsonl(const std::string& path, const TrainDataContext& ctx) {
  KILN_ASSIGN_OR_RETURN(auto rows, read_jsonl(path));
  std::vector<TrainSequence> out;
  for (const auto& [where, j] : rows) {
    KILN_ASSIGN_OR_RETURN(TrainSequence s, sft_sequence(j, where, ctx));
    out.push_back(std::move(s));
  }
  return out;
}

Result<GrpoGroup> grpo_group(const Json& group, const std::string& where, const TrainDataContext& ctx) {
  KILN_RETURN_IF_ERROR(check_context(ctx));
  if (!group.is_object()) return field_error(where, "must be an object with messages and completions");
  KILN_RETURN_IF_ERROR(check_keys(group, where, {"messages", "completions", "chat_template_kwargs"}));
  KILN_RETURN_IF_ERROR(check_messages(group, where));
  Json vars = Json::object();
  if (group.contains("chat_template_kwargs")) {
    vars = group["chat_template_kwargs"];
    if (!vars.is_object()) return field_error(where + ".chat_template_kwargs", "must be an object");
  }
  if (!group.contains("completions")) return field_error(where + ".completions", "is missing");
  const Json& comps = group["completions"];
  if (!comps.is_array() || comps.size() < 2)
    return field_error(where + ".completions", "must be an array of at least 2 completions (advantages compare them)");

  KILN_ASSIGN_OR_RETURN(const std::string prompt_text, render(ctx, group["messages"], GenerationPrompt::kAdd, vars, where + ".messages"));
  TrainSequence prompt;
  append(ctx, prompt_text, TokenRole::kContext, prompt);

  GrpoGroup out;
  for (size_t i = 0; i < comps.size(); ++i) {
    const std::string at = where + ".completions[" + std::to_string(i) + "]";
    const Json& c = comps[i];
    if (!c.is_object()) return field_error(at, "must be an object with text and reward");
    KILN_RETURN_IF_ERROR(check_keys(c, at, {"text", "reward", "trajectory"}));
    if (!c.contains("reward") || !c["reward"].is_number()) return field_error(at + ".reward", "must be a number");
    const double reward = c["reward"].get<double>();
    if (!std::isfinite(reward)) return field_error(at + ".reward", "must be finite");
    GrpoCompletion comp;
    comp.reward = reward;
    comp.sequence = prompt;
    const bool has_text = c.contains("text"), has_traj = c.contains("trajectory");
    if (has_text == has_traj) return field_error(at, "give either text or trajectory (a trajectory holds the whole completion)");
    if (has_text) {
      if (!c["text"].is_string()) return field_error(at + ".text", "must be a string");
      append(ctx, c["text"].get<std::string>(), TokenRole::kTarget, comp.sequence);
    } else {
      const Json& traj = c["trajectory"];
      if (!traj.is_array() || traj.empty()) return field_error(at + ".trajectory", "must be a non-empty array of segments");
      for (size_t j = 0; j < traj.size(); ++j) {
        const std::string sat = at + ".trajectory[" + std::to_string(j) + "]";
        const Json& seg = traj[j];
        if (!seg.is_object()) return field_error(sat, "must be an object with type and text");
        KILN_RETURN_IF_ERROR(check_keys(seg, sat, {"type", "text"}));
        if (!seg.contains("text") || !seg["text"].is_string()) return field_error(sat + ".text", "must be a string");
        const std::string type = seg.contains("type") && seg["type"].is_string() ? seg["type"].get<std::string>() : "";
        if (type != "action" && type != "observation")
          return field_error(sat + ".type", "must be \"action\" or \"observation\"");
        append(ctx, seg["text"].get<std::string>(), type == "action" ? TokenRole::kTarget : TokenRole::kObservation,
               comp.sequence);
      }
    }
    // The policy ended its turn: the end-of-turn token is part of what it chose.
    append(ctx, ctx.end_of_turn, TokenRole::kTarget, comp.sequence);
    KILN_RETURN_IF_ERROR(fit_length(comp.sequence, ctx, at));
    out.completions.push_back(std::move(comp));
  }
  return out;
}

Result<std::vector<GrpoGroup>> grpo_groups(const Json& groups, const TrainDataContext& ctx) {
  if (!groups.is_array() || groups.empty()) return field_error("groups", "must be a non-empty array of groups");
  std::vector<GrpoGroup> out;
  for (size_t i = 0; i < groups.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(GrpoGroup g, grpo_group(groups[i], "groups[" + std::to_string(i) + "]", ctx));
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::vector<GrpoGroup>> grpo_groups_from_jsonl(const std::string& path, const TrainDataContext& ctx) {
  KILN_ASSIGN_OR_RETURN(auto rows, read_jsonl(path));
  std::vector<GrpoGroup> out;
  for (const auto& [where, j] : rows) {
    KILN_ASSIGN_OR_RETURN(GrpoGroup g, grpo_group(j, where, ctx));
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace kiln
