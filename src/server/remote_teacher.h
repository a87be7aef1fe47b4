// OPD's remote teacher (docs/training.md, "Remote teachers"): an OpenAI-compatible server named by
// training.teacher_url (another Kiln, or vLLM) that scores token-id prompts. Alignment is by token
// ids, so the teacher must use the student's tokenizer: checked once per job against its
// /v1/models entry's `tokenizer_sha256` (Kiln reports one), else by its /tokenize of a probe text
// (vLLM); anything else is refused. Each prompt (the teacher's rendering of the messages, then the
// completion's tokens) goes to /v1/completions as a list of ids with `prompt_logprobs: 0` and
// `max_tokens: 1`; the answer's log-probability of each prompt token, as sent, is the teacher's.
// Errors name training.teacher_url.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "server/json_post.h"
#include "tokenizer/tokenizer.h"

namespace kiln {

struct RemoteTeacher {
  JsonEndpoint endpoint;  // field "training.teacher_url"
  std::string model;      // the `model` its requests name ("" : none)
};

// The text whose ids a teacher without a tokenizer hash must give back as the student does: scripts,
// digits, whitespace runs, emoji and the chat template's special tokens.
extern const char* const kTokenizerProbe;

// SHA-256 (hex) of a tokenizer.json's content (`path`: the file, or a folder holding it), written
// as compact JSON with sorted keys: two layouts of the same content agree. Kiln's /v1/models
// reports it as `tokenizer_sha256`.
Result<std::string> tokenizer_content_sha256(const std::string& path);

// Whether the teacher tokenizes as `local` (whose content hash is `local_sha256`) does; the error
// names training.teacher_url and what differed (the two hashes, or the first probe id that differs).
Status check_teacher_tokenizer(const RemoteTeacher& teacher, const Tokenizer& local, const std::string& local_sha256);

// The teacher's log-probability of every token of each prompt but the first: entry m - 1 of a
// prompt's list scores its token m. One POST of all the prompts; its answer is capped at
// 1 MiB + 4 KiB a token sent.
Result<std::vector<std::vector<float>>> teacher_prompt_logprobs(const RemoteTeacher& teacher,
                                                                const std::vector<std::vector<int32_t>>& prompts);

// One choice's `prompt_logprobs` read against the ids sent: entry 0 null, entry m either Kiln's
// {token_id, logprob, ...} or vLLM's {"<id>": {logprob, ...}, ...} holding the sent id. An entry
// that does not score the id sent (a teacher that re-tokenized) is an error naming its position.
Result<std::vector<float>> read_prompt_logprobs(const nlohmann::json& entries, const std::vector<int32_t>& ids);

}  // namespace kiln
