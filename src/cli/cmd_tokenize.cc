// `kiln tokenize` and `kiln chat-template`: the tokenizer and chat template from the command
// line, for debugging prompts, plus an encode-throughput benchmark (`kiln tokenize --bench`).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/thread_pool.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kiln::cli {
namespace {

struct TokenizeOpts {
  std::string tokenizer, text, file, decode, bench;
  bool special_as_text = false;
  int rounds = 5;
};

struct ChatTemplateOpts {
  std::string tokenizer, messages, tools, enable_thinking;
  bool add_generation_prompt = false, ids = false;
};

Result<std::string> read_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(std::string(flag) + ": cannot open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Result<nlohmann::ordered_json> read_json(const std::string& path, const char* flag) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path, flag));
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) return format_error(std::string(flag) + ": " + path + " is not valid JSON");
  return j;
}

Result<std::vector<TokenId>> parse_ids(const std::string& text) {
  std::vector<TokenId> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<TokenId>(v));
    } catch (const std::exception&) {
      return invalid_argument("--decode: '" + item + "' is not a token id");
    }
  }
  return ids;
}

// Ids and the text of each token (lossy where a token is part of a UTF-8 sequence), as JSON.
Result<std::string> describe(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  nlohmann::json pieces = nlohmann::json::array();
  for (TokenId id : ids) {
    std::string bytes;
    KILN_RETURN_IF_ERROR(tok.append_token_bytes(id, SpecialTokenOutput::kKeep, true, bytes));
    pieces.push_back(utf8::sanitize(bytes));
  }
  nlohmann::json out = {{"count", ids.size()}, {"ids", ids}, {"tokens", pieces}};
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Corpus for --bench: JSON lines with "text" (or "hex" bytes), or else one string per line.
Result<std::vector<std::string>> read_corpus(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string data, read_file(path, "--bench"));
  std::vector<std::string> texts;
  std::stringstream ss(data);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("text") && j["text"].is_string()) {
      texts.push_back(j["text"]);
    } else if (!j.is_discarded() && j.is_object() && j.contains("hex") && j["hex"].is_string()) {
      const std::string hex = j["hex"];
      std::string bytes;
      for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      texts.push_back(bytes);
    } else {
      texts.push_back(line);
    }
  }
  if (texts.empty()) return invalid_argument("--bench: " + path + " holds no text");
  return texts;
}

Status run_bench(const Tokenizer& tok, const TokenizeOpts& o) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> texts, read_corpus(o.bench));
  if (o.rounds < 1) return invalid_argument("--rounds must be >= 1");
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  const auto special = o.special_as_text ? SpecialTokens::kTreatAsText : SpecialTokens::kRecognize;
  // Warm-up: fills the word caches of the calling thread and of the pool's workers.
  for (const auto& t : texts) (void)tok.encode(t, special);
  (void)tok.encode_batch(texts, special);

  using Clock = std::chrono::steady_clock;
  size_t tokens = 0;
  auto t0 = Clock::now();
  for (int r = 0; r < o.rounds; ++r) {
    for (const auto& t : texts) tokens += tok.encode(t, special).size();
  }
  const double single = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int r = 0; r < o.rounds; ++r) (void)tok.encode_batch(texts, special);
  const double multi = std::chrono::duration<double>(Clock::now() - t0).count();
  const double total = static_cast<double>(bytes) * o.rounds;
  nlohmann::json out = {
      {"corpus", o.bench},
      {"strings", texts.size()},
      {"corpus_bytes", bytes},
      {"rounds", o.rounds},
      {"tokens_per_round", tokens / static_cast<size_t>(o.rounds)},
      {"single_thread", {{"seconds", single}, {"mb_per_s", total / single / 1e6}, {"tokens_per_s", tokens / single}}},
      {"all_threads",
       {{"threads", default_thread_pool().size()}, {"seconds", multi}, {"mb_per_s", total / multi / 1e6},
        {"tokens_per_s", tokens / multi}}},
  };
  std::printf("%s\n", out.dump(2).c_str());
  return {};
}

Status run_tokenize(const TokenizeOpts& o) {
  KILN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(o.tokenizer));
  if (!o.bench.empty()) return run_bench(tok, o);
  if (!o.decode.empty()) {
    KILN_ASSIGN_OR_RETURN(std::vector<TokenId> ids, parse_ids(o.decode));
    KILN_ASSIGN_OR_RETURN(std::string text, tok.decode(ids));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    return {};
  }
  std::string text = o.text;
  if (!o.file.empty()) {
    KILN_ASSIGN_OR_RETURN(text, read_file(o.file, "--file"));
  } else if (o.text.empty()) {
    return invalid_argument("give the text to tokenize, --file, --decode or --bench");
  }
  const auto ids = tok.encode(text, o.special_as_text ? SpecialTokens::kTreatAsText : SpecialTokens::kRecognize);
  KILN_ASSIGN_OR_RETURN(std::string json, describe(tok, ids));
  std::printf("%s\n", json.c_str());
  return {};
}

Status run_chat_template(const ChatTemplateOpts& o) {
  KILN_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::load(o.tokenizer));
  ChatTemplateRequest request;
  KILN_ASSIGN_OR_RETURN(nlohmann::ordered_json messages, read_json(o.messages, "--messages"));
  // Accept either a bare array of messages or an OpenAI-style body {"messages": [...], "tools": [...]}.
  if (messages.is_object() && messages.contains("messages")) {
    if (messages.contains("tools")) request.tools = messages["tools"];
    request.messages = messages["messages"];
  } else {
    request.messages = messages;
  }
  if (!o.tools.empty()) {
    KILN_ASSIGN_OR_RETURN(request.tools, read_json(o.tools, "--tools"));
  }
  request.generation_prompt = o.add_generation_prompt ? GenerationPrompt::kAdd : GenerationPrompt::kOmit;
  if (o.enable_thinking == "true" || o.enable_thinking == "false") {
    request.variables["enable_thinking"] = o.enable_thinking == "true";
  } else if (!o.enable_thinking.empty()) {
    return invalid_argument("--enable-thinking must be true or false, not '" + o.enable_thinking + "'");
  }
  KILN_ASSIGN_OR_RETURN(std::string text, tmpl.render(request));
  if (!o.ids) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return {};
  }
  KILN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(o.tokenizer));
  KILN_ASSIGN_OR_RETURN(std::string json, describe(tok, tok.encode(text)));
  std::printf("%s\n", json.c_str());
  return {};
}

}  // namespace

void add_tokenizer_commands(CLI::App& app) {
  auto tokenize_opts = std::make_shared<TokenizeOpts>();
  CLI::App* tokenize = app.add_subcommand("tokenize", "Encode text (or decode ids) with a tokenizer.json");
  tokenize->add_option("--tokenizer", tokenize_opts->tokenizer, "Folder holding tokenizer.json (or the file)")->required();
  tokenize->add_option("text", tokenize_opts->text, "Text to encode");
  tokenize->add_option("--file", tokenize_opts->file, "Encode this file's contents instead");
  tokenize->add_option("--decode", tokenize_opts->decode, "Decode comma-separated token ids instead");
  tokenize->add_flag("--special-as-text", tokenize_opts->special_as_text,
                     "Tokenize special tokens in the text as plain text");
  tokenize->add_option("--bench", tokenize_opts->bench,
                       "Measure encode throughput on a corpus (JSON lines with \"text\", or plain lines)");
  tokenize->add_option("--rounds", tokenize_opts->rounds, "Passes over the corpus for --bench (default 5)");
  tokenize->callback([tokenize_opts] { report(run_tokenize(*tokenize_opts)); });

  auto chat_opts = std::make_shared<ChatTemplateOpts>();
  CLI::App* chat = app.add_subcommand("chat-template", "Render a model's chat template for a conversation");
  chat->add_option("--tokenizer", chat_opts->tokenizer,
                   "Folder with tokenizer_config.json (and optionally chat_template.jinja)")->required();
  chat->add_option("--messages", chat_opts->messages,
                   "JSON file: an array of messages, or an object with \"messages\" (and \"tools\")")->required();
  chat->add_option("--tools", chat_opts->tools, "JSON file with an array of tool schemas");
  chat->add_flag("--add-generation-prompt", chat_opts->add_generation_prompt, "End with the assistant's turn header");
  chat->add_option("--enable-thinking", chat_opts->enable_thinking, "Pass enable_thinking=true|false to the template");
  chat->add_flag("--ids", chat_opts->ids, "Print token ids of the rendered text instead of the text");
  chat->callback([chat_opts] { report(run_chat_template(*chat_opts)); });
}

}  // namespace kiln::cli
