#include "server/remote_teacher.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json_text.h"
#include "core/sha256.h"

namespace kiln {

using nlohmann::json;

const char* const kTokenizerProbe =
    "Kiln tokenizer probe: 0 12 345 6789, 3.14159; e=mc^2\n\n\t  indented    spaces\r\n"
    "English, Français, Deutsch (äöüß), Русский, Ελληνικά, العربية, עברית, हिन्दी, 中文, 日本語のテキスト, 한국어 "
    "emoji 🙂🚀👩‍💻 code: def f(x): return x**2  # ok\n"
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<|endoftext|>";

namespace {

Status not_aligned(const RemoteTeacher& t, const std::string& what) {
  return failed_precondition("training.teacher_url " + t.endpoint.url + ": " + what +
                             "; a remote teacher must use the student's tokenizer (its log-probabilities are "
                             "aligned to the student's tokens by id)");
}

}  // namespace

Result<std::string> tokenizer_content_sha256(const std::string& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return not_found("tokenizer file " + file.string() + " cannot be opened");
  std::stringstream text;
  text << in.rdbuf();
  KILN_ASSIGN_OR_RETURN(json j, parse_json(text.str(), file.string()));
  return sha256_hex(j.dump());
}

Status check_teacher_tokenizer(const RemoteTeacher& t, const Tokenizer& local, const std::string& local_sha256) {
  KILN_ASSIGN_OR_RETURN(std::string listed, get_json(t.endpoint, "/v1/models"));
  const json models = json::parse(listed, nullptr, false);
  if (!models.is_object() || !models.contains("data") || !models["data"].is_array())
    return not_aligned(t, "its /v1/models answer is not a list of models");
  const json* entry = nullptr;
  for (const json& m : models["data"])
    if (m.is_object() && (t.model.empty() || (m.contains("id") && m["id"] == t.model))) {
      entry = &m;
      break;
    }
  if (!entry)
    return not_aligned(t, t.model.empty() ? std::string("its /v1/models lists no model")
                                          : "its /v1/models does not list training.teacher_model '" + t.model + "'");
  if (entry->contains("tokenizer_sha256")) {  // Kiln: the hash of its tokenizer.json's content
    const json& h = (*entry)["tokenizer_sha256"];
    if (!h.is_string() || h.get<std::string>() != local_sha256)
      return not_aligned(t, "its tokenizer differs from the student's (tokenizer_sha256 " + h.dump() +
                                ", the student's \"" + local_sha256 + "\")");
    return {};
  }
  // No hash (vLLM): its ids of the probe text against the student's.
  json body = {{"prompt", kTokenizerProbe}, {"add_special_tokens", false}};
  if (!t.model.empty()) body["model"] = t.model;
  Result<std::string> answer = post_json(t.endpoint, body, "/tokenize");
  if (!answer.ok())
    return not_aligned(t, "its /v1/models gives no tokenizer_sha256 and its /tokenize did not answer (" +
                              answer.status().message() + ")");
  const json got = json::parse(*answer, nullptr, false);
  if (!got.is_object() || !got.contains("tokens") || !got["tokens"].is_array())
    return not_aligned(t, "its /tokenize answer has no list `tokens`");
  const std::vector<int32_t> want = local.encode(kTokenizerProbe);
  const json& ids = got["tokens"];
  for (size_t i = 0; i < std::max(want.size(), ids.size()); ++i) {
    const bool same = i < want.size() && i < ids.size() && ids[i].is_number_integer() && ids[i].get<int64_t>() == want[i];
    if (!same)
      return not_aligned(t, "its /tokenize of the probe text differs from the student's at token " + std::to_string(i) +
                                " (" + (i < ids.size() ? ids[i].dump() : std::string("none")) + " against " +
                                (i < want.size() ? std::to_string(want[i]) : std::string("none")) + ")");
  }
  return {};
}

Result<std::vector<float>> read_prompt_logprobs(const json& entries, const std::vector<int32_t>& ids) {
  if (!entries.is_array() || entries.size() != ids.size())
    return invalid_argument("prompt_logprobs must be a list of " + std::to_string(ids.size()) + " entries, one a token sent");
  std::vector<float> out;
  out.reserve(ids.size());
  for (size_t m = 1; m < ids.size(); ++m) {
    const json& e = entries[m];
    const std::string at = "prompt_logprobs[" + std::to_string(m) + "]";
    const std::string id = std::to_string(ids[m]);
    const json* lp = nullptr;
    if (e.is_object() && e.contains("token_id")) {  // Kiln: {token, token_id, logprob, top_logprobs}
      if (!(e["token_id"].is_number_integer() && e["token_id"].get<int64_t>() == ids[m]))
        return invalid_argument(at + " scores token " + e["token_id"].dump() + ", not the token sent (" + id + ")");
      if (e.contains("logprob")) lp = &e["logprob"];
    } else if (e.is_object()) {  // vLLM: {"<id>": {logprob, rank, decoded_token}, ...}
      if (!e.contains(id) || !e[id].is_object() || !e[id].contains("logprob"))
        return invalid_argument(at + " does not score the token sent (" + id + ")");
      lp = &e[id]["logprob"];
    }
    if (!lp) return invalid_argument(at + " has no log-probability of the token sent (" + id + ")");
    // JSON has no -inf: a server may write a token it cannot produce as null or a very negative number.
    if (!lp->is_number() || std::isnan(lp->get<double>()) || lp->get<double>() > 0)
      return invalid_argument(at + " is not a log-probability: " + lp->dump());
    out.push_back(static_cast<float>(lp->get<double>()));
  }
  return out;
}

Result<std::vector<std::vector<float>>> teacher_prompt_logprobs(const RemoteTeacher& t,
                                                                const std::vector<std::vector<int32_t>>& prompts) {
  JsonEndpoint to = t.endpoint;
  size_t tokens = 0;
  for (const auto& p : prompts) tokens += p.size();
  to.max_response_bytes = (size_t{1} << 20) + 4096 * tokens;
  json body = {{"prompt", prompts}, {"max_tokens", 1}, {"temperature", 0}, {"prompt_logprobs", 0}};
  if (!t.model.empty()) body["model"] = t.model;
  KILN_ASSIGN_OR_RETURN(std::string answer, post_json(to, body, "/v1/completions"));
  // A malformed answer is not retried: the server would answer the same.
  const std::string from = "training.teacher_url " + t.endpoint.url + " (/v1/completions): ";
  const json j = json::parse(answer, nullptr, false);
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].size() != prompts.size())
    return invalid_argument(from + "the answer must hold one choice per prompt (" + std::to_string(prompts.size()) + ")");
  std::vector<std::vector<float>> out(prompts.size());
  std::vector<bool> seen(prompts.size(), false);
  for (const json& c : j["choices"]) {
    if (!c.is_object() || !c.contains("index") || !c["index"].is_number_unsigned() ||
        c["index"].get<uint64_t>() >= prompts.size() || seen[c["index"].get<size_t>()])
      return invalid_argument(from + "a choice's index is missing, out of range or repeated");
    const size_t i = c["index"].get<size_t>();
    seen[i] = true;
    Result<std::vector<float>> lp = read_prompt_logprobs(c.value("prompt_logprobs", json()), prompts[i]);
    if (!lp.ok()) return invalid_argument(from + "choices index " + std::to_string(i) + ": " + lp.status().message());
    out[i] = std::move(*lp);
  }
  return out;
}

}  // namespace kiln
