// `kiln generate`: greedy generation from token ids, without a server.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <sstream>

#include "backend/registry.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "model/qwen35.h"

namespace kiln::cli {

namespace {

struct GenerateOpts {
  std::string model, prompt_ids, backend = "cpu";
  int64_t max_tokens = 16;
  int chunk = 64;
  bool ignore_eos = false;
};

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return invalid_argument("--prompt-ids: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) return invalid_argument("--prompt-ids: no token ids given");
  return ids;
}

Status run(const GenerateOpts& o) {
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, parse_ids(o.prompt_ids));
  if (o.max_tokens < 0) return invalid_argument("--max-tokens must be >= 0");
  KILN_ASSIGN_OR_RETURN(std::string dir, resolve_model_dir(o.model));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, create_backend(o.backend));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35Model> model, Qwen35Model::load(dir, *backend));
  model->options().gdn_chunk = o.chunk;
  const auto& c = model->config();
  for (int32_t id : prompt)
    if (id >= c.vocab_size)
      return invalid_argument("--prompt-ids: token " + std::to_string(id) + " is outside the vocabulary (" +
                              std::to_string(c.vocab_size) + ")");
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.max_tokens;
  KILN_ASSIGN_OR_RETURN(ModelState state, model->create_state({1, (total + ModelState::kBlockSize - 1) / ModelState::kBlockSize}));
  KILN_ASSIGN_OR_RETURN(SequenceState seq, state.new_sequence());

  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  std::vector<int32_t> next = prompt;
  Tensor ids = Tensor::empty({1}, DType::kI32);
  for (int64_t step = 0; step < o.max_tokens; ++step) {
    SequenceInput row{&seq, next};
    KILN_ASSIGN_OR_RETURN(Tensor logits, model->forward({&row, 1}, LogitsMode::kLast, state));
    KILN_RETURN_IF_ERROR(backend->sampling().argmax({logits, ids}));
    const int32_t tok = ids.data<int32_t>()[0];
    out.push_back(tok);
    std::printf("%s%d", out.size() == 1 ? "" : ",", tok);
    std::fflush(stdout);
    if (!o.ignore_eos && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), tok) != c.eos_token_ids.end()) break;
    next = {tok};
  }
  std::printf("\n");
  std::fflush(stdout);  // the ids line ends before the timing line on stderr
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "generated %zu tokens in %.2f s (%zu prompt tokens, backend %s)\n", out.size(), secs,
               prompt.size(), o.backend.c_str());
  state.release(seq);
  return {};
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Greedy generation from token ids, printed as comma-separated ids");
  auto o = std::make_shared<GenerateOpts>();
  cmd->add_option("--model", o->model,
                  "Checkpoint folder (config.json + safetensors) or Hub name ORG/NAME[@REVISION]; default: a random-weight 'small' "
                  "checkpoint created on first use under $KILN_HOME (~/.cache/kiln)");
  cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt token ids, comma-separated (e.g. 1,2,3)")->required();
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--backend", o->backend, "Backend: one of those built into this binary (cpu here)")->capture_default_str();
  cmd->add_option("--gdn-chunk", o->chunk, "Chunk size of the GDN prefill (does not change results)")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after an end-of-sequence token");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
