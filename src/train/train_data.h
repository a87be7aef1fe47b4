// The training API's inputs as TrainSequences: SFT conversations (`examples`, or JSONL lines of
// the same shape) rendered with the model's chat template and tokenized, with the loss on the
// assistant turns; GRPO groups of completions with rewards. Every error names the field by its
// JSON path ("examples[2].messages[1].content") or, for a file, "path:line".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/train_run.h"

namespace kiln {

struct TrainDataContext {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  // The text of the token that closes a turn (the template writes it after each message; the
  // model's eos): an assistant turn's target runs through it.
  std::string end_of_turn = "<|im_end|>";
  int64_t max_tokens = 0;  // a sequence longer than this (the model's context) is an error; 0: no limit
  // A sequence longer than this keeps its first max_seq_length tokens (0: no cut); one left
  // without a target token is an error naming it.
  int64_t max_seq_length = 0;
};

// SFT. A conversation `{"messages": [{"role", "content"}, ...]}` becomes one sequence: the tokens
// of each assistant turn's content and its end-of-turn token are kTarget, all else kContext.
// The spans come from rendering prefixes: the conversation before an assistant turn with the
// generation prompt must be a prefix of the whole conversation's rendering (an error otherwise).
// `where` names the example in errors ("examples[3]", "data.jsonl:7").
Result<TrainSequence> sft_sequence(const nlohmann::ordered_json& example, const std::string& where,
                                   const TrainDataContext& ctx);
// `examples`: a non-empty array of conversations (the body of POST /v1/train/sft).
Result<std::vector<TrainSequence>> sft_sequences(const nlohmann::ordered_json& examples, const TrainDataContext& ctx);
// A JSONL file, one conversation per line (blank lines skipped): `dataset_path`, `kiln train sft --file`.
Result<std::vector<TrainSequence>> sft_sequences_from_jsonl(const std::string& path, const TrainDataContext& ctx);

// GRPO. A group `{"messages": [...], "completions": [{"text", "reward"}, ...]}` (optionally
// `chat_template_kwargs`, as the chat request that sampled the completions had): each completion
// becomes the prompt (the messages rendered with the generation prompt) followed by the
// completion's tokens and the end-of-turn token, all kTarget. Instead of `text` a completion may
// carry `trajectory`: [{"type": "action" | "observation", "text": ...}, ...], a multi-turn rollout
// whose action segments are kTarget and observation segments (environment output) kObservation
// (ECHO's term). A group needs at least 2 completions; rewards must be finite numbers.
Result<GrpoGroup> grpo_group(const nlohmann::ordered_json& group, const std::string& where, const TrainDataContext& ctx);
// `groups`: a non-empty array of groups (the body of POST /v1/train/grpo).
Result<std::vector<GrpoGroup>> grpo_groups(const nlohmann::ordered_json& groups, const TrainDataContext& ctx);
// A JSONL file, one group per line: `kiln train grpo --file`.
Result<std::vector<GrpoGroup>> grpo_groups_from_jsonl(const std::string& path, const TrainDataContext& ctx);

}  // namespace kiln
