#include "server/rollout_service.h"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <thread>

#include "server/json_post.h"
#include "server/structured_output.h"

namespace kiln {

namespace {

// One request in flight: its channel and what it produced so far.
struct Pending {
  std::shared_ptr<TokenChannel> channel;
  std::vector<int32_t> tokens;
  std::vector<SampledToken> prompt_scores;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

// A seed per (job seed, step, prompt, sample): splitmix64 over their combination.
uint64_t mix_seed(uint64_t seed, int64_t step, size_t prompt, int64_t sample) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(step) * 0xbf58476d1ce4e5b9ull +
               static_cast<uint64_t>(prompt) * 0x94d049bb133111ebull + static_cast<uint64_t>(sample) + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Submits every spec to the engine (when its queue is full, first waiting for the oldest request
// still running) and reads every channel until each request has finished. The channels are read
// round-robin: a full channel pauses its request, so none may be left unread.
Status run_requests(const ServerContext& ctx, std::vector<RequestSpec> specs, std::vector<Pending>& out,
                    const std::atomic<bool>& cancel) {
  out.assign(specs.size(), {});
  size_t drained = 0;  // out[0, drained) have finished
  auto poll = [&](size_t upto) -> bool {  // one pass over the unfinished; whether anything arrived
    bool any = false;
    for (size_t i = drained; i < upto; ++i) {
      Pending& p = out[i];
      if (p.finish != FinishReason::kNone) continue;
      while (auto e = p.channel->try_pop()) {
        any = true;
        if (!e->prompt_scores.empty()) p.prompt_scores = std::move(e->prompt_scores);
        if (e->token >= 0) p.tokens.push_back(e->token);
        if (e->finish != FinishReason::kNone) {
          p.finish = e->finish;
          p.error = e->error;
          break;
        }
      }
    }
    while (drained < upto && out[drained].finish != FinishReason::kNone) ++drained;
    return any;
  };
  auto cancel_all = [&](size_t upto) {
    for (size_t i = 0; i < upto; ++i)
      if (out[i].channel) out[i].channel->cancel();
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    for (;;) {
      if (cancel.load() || ctx.stopping.load()) {
        cancel_all(i);
        return failed_precondition(cancel.load() ? "cancelled" : "the server is stopping");
      }
      Result<Submission> s = ctx.actor->submit(specs[i]);
      if (s.ok()) {
        out[i].channel = s->channel;
        break;
      }
      if (s.status().code() != ErrorCode::kResourceExhausted || drained == i) {
        cancel_all(i);
        return s.status().with_context("the engine refused a rollout request");
      }
      if (!poll(i)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  while (drained < specs.size()) {
    if (cancel.load() || ctx.stopping.load()) {
      cancel_all(specs.size());
      return failed_precondition(cancel.load() ? "cancelled" : "the server is stopping");
    }
    if (!poll(specs.size())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (const Pending& p : out)
    if (p.finish == FinishReason::kError || p.finish == FinishReason::kCancelled)
      return internal_error("a rollout request ended with " + std::string(finish_reason_name(p.finish)) +
                            (p.error.empty() ? "" : ": " + p.error));
  return {};
}

}  // namespace

Result<std::vector<double>> reward_server_scores(const JsonEndpoint& server, const nlohmann::json& body,
                                                 size_t completions) {
  // A malformed answer is not retried: the server would answer the same.
  KILN_ASSIGN_OR_RETURN(std::string answer, post_json(server, body));
  const nlohmann::json j = nlohmann::json::parse(answer, nullptr, false);
  if (!j.is_object() || !j.contains("scores") || !j["scores"].is_array())
    return invalid_argument("training.reward_url " + server.url + " answered without a list `scores`");
  if (j["scores"].size() != completions)
    return invalid_argument("training.reward_url " + server.url + " answered " + std::to_string(j["scores"].size()) +
                            " scores for " + std::to_string(completions) + " completions");
  std::vector<double> scores;
  for (size_t i = 0; i < completions; ++i) {
    const nlohmann::json& v = j["scores"][i];
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      return invalid_argument("training.reward_url " + server.url + ": scores[" + std::to_string(i) +
                              "] is not a finite number: " + v.dump());
    scores.push_back(v.get<double>());
  }
  return scores;
}

RolloutSource make_rollout_source(const ServerContext& ctx, std::shared_ptr<const RolloutSettings> settings, int64_t steps) {
  RolloutSource src;
  src.steps = steps;
  const ServerContext* c = &ctx;
  // A remote teacher's tokenizer is checked once per job, before its first scores are asked for.
  auto teacher_checked = std::make_shared<bool>(false);
  src.sample = [c, settings, teacher_checked](int64_t step, const LoraAdapter& adapter,
                             const std::atomic<bool>& cancel) -> Result<RolloutSource::Batch> {
    const ServerContext& ctx = *c;
    const RolloutSettings& s = *settings;
    const auto t_sampling = std::chrono::steady_clock::now();
    auto seconds_since = [](std::chrono::steady_clock::time_point t0) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    if (!ctx.actor || !ctx.tokenizer) return failed_precondition("the server has no engine to sample with");
    // The adapter being trained: a copy of its views (the factors' storage is shared, so the
    // engine reads the weights as they stand, and keeps them alive while it holds them). The run
    // waits for every request below to finish before its next step changes them.
    const auto student = std::make_shared<const LoraAdapter>(adapter);
    const std::string key = s.key + "@" + std::to_string(step);
    std::vector<int32_t> stops;
    if (auto im_end = ctx.tokenizer->token_to_id("<|im_end|>"); im_end && !s.ignore_eos) stops.push_back(*im_end);
    std::vector<RequestSpec> specs;
    for (size_t p = 0; p < s.prompts.size(); ++p)
      for (int64_t i = 0; i < s.group_size; ++i) {
        RequestSpec r;
        r.prompt = s.prompts[p].tokens;
        r.sampling.temperature = s.temperature;
        r.sampling.top_p = s.top_p;
        r.sampling.top_k = static_cast<int32_t>(s.top_k);
        r.sampling.logprobs = false;
        r.seed = mix_seed(s.seed, step, p, i);
        r.max_tokens = s.max_tokens;
        r.stop_token_ids = stops;
        r.ignore_eos = s.ignore_eos;
        r.private_adapter = student;
        r.private_key = key;
        if (s.grammar) {
          r.constraint = StructuredOutputs::constraint(s.grammar);
          const ConstraintStart start =
              constraint_start(s.prompts[p].opens_reasoning, s.enable_thinking, ctx.think_open_id, ctx.think_close_id);
          r.constraint_after = start.after;
          r.optional_reasoning_open = start.optional_open;
        }
        specs.push_back(std::move(r));
      }
    std::vector<Pending> done;
    KILN_RETURN_IF_ERROR(run_requests(ctx, std::move(specs), done, cancel));

    RolloutSource::Batch out;
    out.sampling_seconds = seconds_since(t_sampling);
    const auto t_scoring = std::chrono::steady_clock::now();
    double reward_sum = 0;
    size_t k = 0;
    for (size_t p = 0; p < s.prompts.size(); ++p) {
      const RolloutPrompt& rp = s.prompts[p];
      GrpoGroup g;
      std::vector<std::string> texts;
      for (int64_t i = 0; i < s.group_size; ++i, ++k) {
        GrpoCompletion comp;
        TrainSequence& q = comp.sequence;
        q.tokens = rp.tokens;
        q.roles.assign(rp.tokens.size(), TokenRole::kContext);
        for (int32_t t : done[k].tokens) q.tokens.push_back(t), q.roles.push_back(TokenRole::kTarget);
        // The text the reward reads: ids past the tokenizer's vocabulary (a model's padding rows)
        // have no text and are left out of it, as a chat reply leaves them out.
        std::vector<int32_t> known;
        for (int32_t t : done[k].tokens)
          if (t >= 0 && static_cast<size_t>(t) < ctx.tokenizer->vocab_size()) known.push_back(t);
        KILN_ASSIGN_OR_RETURN(std::string text, ctx.tokenizer->decode(known, SpecialTokenOutput::kSkip));
        texts.push_back(std::move(text));
        g.completions.push_back(std::move(comp));
      }
      if (s.scorer) {
        for (size_t i = 0; i < texts.size(); ++i)
          g.completions[i].reward = score(*s.scorer, rp.reference.value_or(nlohmann::json("")), texts[i]).passed ? 1.0 : 0.0;
      } else if (s.reward_server) {
        nlohmann::json body = {{"prompt", rp.messages},
                               {"reference", rp.reference.value_or(nlohmann::json(nullptr))},
                               {"completions", texts}};
        auto scores = reward_server_scores(*s.reward_server, body, texts.size());
        if (!scores.ok()) return scores.status().with_context("the reward of prompts[" + std::to_string(p) + "]");
        for (size_t i = 0; i < texts.size(); ++i) g.completions[i].reward = (*scores)[i];
      }
      for (const GrpoCompletion& comp : g.completions) reward_sum += comp.reward;
      out.groups.push_back(std::move(g));
    }
    if (s.scorer || s.reward_server)
      out.mean_reward = reward_sum / static_cast<double>(s.prompts.size() * static_cast<size_t>(s.group_size));
    out.scoring_seconds = seconds_since(t_scoring);

    if (s.opd) {
      const auto t_teacher = std::chrono::steady_clock::now();
      // The teacher's log-probability of every sampled token: its prompt, then the completion, as
      // one prompt scored (prompt_logprobs) by the engine, under the teacher's adapter or none, or
      // by the remote teacher; entry m - 1 of a prompt's scores is its token m's.
      std::vector<std::vector<int32_t>> teach;
      std::vector<std::pair<size_t, size_t>> where;  // (group, completion)
      for (size_t p = 0; p < out.groups.size(); ++p)
        for (size_t i = 0; i < out.groups[p].completions.size(); ++i) {
          const TrainSequence& q = out.groups[p].completions[i].sequence;
          std::vector<int32_t> prompt = s.prompts[p].teacher_tokens;
          prompt.insert(prompt.end(), q.tokens.begin() + static_cast<std::ptrdiff_t>(s.prompts[p].tokens.size()),
                        q.tokens.end());
          teach.push_back(std::move(prompt));
          where.emplace_back(p, i);
        }
      std::vector<std::vector<float>> scores(teach.size());
      if (s.remote_teacher) {
        if (!*teacher_checked) {
          Status st = check_teacher_tokenizer(*s.remote_teacher, *ctx.tokenizer, ctx.tokenizer_sha256);
          if (!st.ok()) return st.with_context("the remote teacher's tokenizer");
          *teacher_checked = true;
        }
        // One call per prompt, with its group's completions.
        for (size_t j = 0; j < teach.size();) {
          if (cancel.load()) return failed_precondition("cancelled");
          const size_t p = where[j].first, n = out.groups[p].completions.size();
          const std::vector<std::vector<int32_t>> group(teach.begin() + static_cast<std::ptrdiff_t>(j),
                                                        teach.begin() + static_cast<std::ptrdiff_t>(j + n));
          auto lp = teacher_prompt_logprobs(*s.remote_teacher, group);
          if (!lp.ok()) return lp.status().with_context("the teacher's log-probabilities of prompts[" + std::to_string(p) + "]");
          for (size_t i = 0; i < n; ++i) scores[j + i] = std::move((*lp)[i]);
          j += n;
        }
      } else {
        std::vector<RequestSpec> specs;
        for (std::vector<int32_t>& prompt : teach) {
          RequestSpec r;
          r.prompt = std::move(prompt);
          r.sampling.temperature = 0;
          r.sampling.logprobs = false;
          r.max_tokens = 1;
          r.prompt_logprobs = 0;
          if (s.teacher_adapter.empty()) r.base_model = true;
          else r.adapter = s.teacher_adapter;
          specs.push_back(std::move(r));
        }
        std::vector<Pending> scored;
        Status st = run_requests(ctx, std::move(specs), scored, cancel);
        if (!st.ok()) return st.with_context("the teacher's log-probabilities");
        for (size_t j = 0; j < scored.size(); ++j)
          for (const SampledToken& t : scored[j].prompt_scores) scores[j].push_back(t.logprob);
      }
      for (size_t j = 0; j < where.size(); ++j) {
        const auto [p, i] = where[j];
        GrpoCompletion& comp = out.groups[p].completions[i];
        const size_t student_prompt = s.prompts[p].tokens.size(), teacher_prompt = s.prompts[p].teacher_tokens.size();
        const size_t n = comp.sequence.tokens.size() - student_prompt;
        if (scores[j].size() + 1 < teacher_prompt + n)
          return internal_error("the teacher scored " + std::to_string(scores[j].size()) + " prompt tokens of " +
                                std::to_string(teacher_prompt + n));
        comp.teacher_logp.assign(comp.sequence.tokens.size(), 0.f);
        for (size_t t = 0; t < n; ++t) comp.teacher_logp[student_prompt + t] = scores[j][teacher_prompt + t - 1];
      }
      out.teacher_seconds = seconds_since(t_teacher);
    }
    return out;
  };
  return src;
}

}  // namespace kiln
