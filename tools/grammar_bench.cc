// grammar_bench: what structured outputs cost on the host, without a model. Compiles a JSON
// schema (cold, and through the grammar cache), then follows the tokens of a document that
// validates (as a model writing it would emit them) and times the token mask before each one:
// first with an empty mask cache (every state met for the first time), then warm; then the masks
// of a batch of rows in parallel, and the cost of filling every state up front. JSON on stdout.
//
//   grammar_bench [--tokenizer DIR] [--schema FILE] [--document FILE] [--vocab N] [--threads N]
//                 [--rows N] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "grammar/automaton.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using kiln::grammar::GrammarCache;
using kiln::grammar::GrammarKind;
using kiln::grammar::GrammarSpec;
using kiln::grammar::MaskCache;
using kiln::grammar::Matcher;
using kiln::grammar::TokenVocabulary;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "grammar_bench: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <typename T>
T check(kiln::Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "grammar_bench: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void check(const kiln::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "grammar_bench: %s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

nlohmann::json summary(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double x : us) sum += x;
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))]; };
  return {{"mean_us", sum / static_cast<double>(us.size())}, {"p50_us", at(0.5)}, {"p99_us", at(0.99)}, {"max_us", us.back()}};
}

// The mask before each token of `ids`, on one matcher; the token is then accepted.
std::vector<double> time_masks(const std::shared_ptr<const MaskCache>& masks, const std::vector<kiln::TokenId>& ids) {
  Matcher m(masks);
  std::vector<uint32_t> words(masks->vocabulary().mask_words());
  std::vector<double> us;
  for (kiln::TokenId id : ids) {
    const auto t = Clock::now();
    check(m.fill_mask(words), "filling a mask");
    us.push_back(us_since(t));
    if (!kiln::grammar::has_bit(words.data(), id)) {
      std::fprintf(stderr, "grammar_bench: the document's token %d is not in its mask\n", id);
      std::exit(1);
    }
    check(m.accept_token(id), "accepting the document's token");
  }
  if (!m.is_complete()) {
    std::fprintf(stderr, "grammar_bench: the document does not complete the schema\n");
    std::exit(1);
  }
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_dir = ".cache/tokenizers/qwen3";
  std::string schema_path = "bench/grammar/order-schema.json";
  std::string document_path = "bench/grammar/order-document.json";
  size_t vocab_size = 248320;
  int threads = 2, rows = 16, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--tokenizer") tokenizer_dir = value;
    else if (flag == "--schema") schema_path = value;
    else if (flag == "--document") document_path = value;
    else if (flag == "--vocab") vocab_size = std::stoul(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--rows") rows = std::stoi(value);
    else if (flag == "--repeats") repeats = std::stoi(value);
    else {
      std::fprintf(stderr, "grammar_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const std::string schema = read_file(schema_path);
  std::string document = read_file(document_path);
  while (!document.empty() && (document.back() == '\n' || document.back() == '\r')) document.pop_back();  // the file's line end
  const kiln::Tokenizer tokenizer = check(kiln::Tokenizer::load(tokenizer_dir), "loading the tokenizer");
  std::vector<int32_t> stops;
  if (auto id = tokenizer.token_to_id("<|im_end|>")) stops.push_back(*id);

  auto t = Clock::now();
  auto vocab = std::make_shared<const TokenVocabulary>(
      check(TokenVocabulary::from_tokenizer(tokenizer, vocab_size, stops), "building the vocabulary"));
  const double vocab_ms = us_since(t) / 1000;

  // Compile: schema text to automaton, fresh each time; then the cache's repeat.
  std::vector<double> compile_us;
  int32_t states = 0;
  for (int r = 0; r < repeats; ++r) {
    t = Clock::now();
    auto g = check(kiln::grammar::json_schema_grammar(std::string_view(schema)), "compiling the schema");
    auto a = check(kiln::grammar::compile_grammar(g), "compiling the grammar");
    compile_us.push_back(us_since(t));
    states = a.state_count();
  }
  GrammarCache cache(vocab, 8);
  const GrammarSpec spec{GrammarKind::kJsonSchema, schema, {}};
  (void)check(cache.get(spec), "compiling through the cache");
  std::vector<double> cached_us;
  for (int r = 0; r < repeats; ++r) {
    t = Clock::now();
    (void)check(cache.get(spec), "the cache's repeat");
    cached_us.push_back(us_since(t));
  }

  const std::vector<kiln::TokenId> ids = tokenizer.encode(document, kiln::SpecialTokens::kTreatAsText);
  std::vector<kiln::TokenId> with_stop = ids;
  with_stop.push_back(stops.at(0));

  // Cold: a fresh mask cache, as the first request with this schema meets it.
  std::vector<double> cold, warm;
  std::shared_ptr<const MaskCache> masks;
  for (int r = 0; r < repeats; ++r) {
    auto fresh = std::make_shared<const MaskCache>(check(cache.get(spec), "the cache")->automaton_ptr(), vocab);
    const std::vector<double> us = time_masks(fresh, with_stop);
    cold.insert(cold.end(), us.begin(), us.end());
    masks = fresh;
  }
  for (int r = 0; r < repeats; ++r) {
    const std::vector<double> us = time_masks(masks, with_stop);
    warm.insert(warm.end(), us.begin(), us.end());
  }

  // A batch: `rows` matchers spread along the document, their masks filled in parallel.
  kiln::ThreadPool pool(threads);
  std::vector<std::unique_ptr<Matcher>> batch;
  std::vector<Matcher*> ptrs;
  for (int r = 0; r < rows; ++r) {
    batch.push_back(std::make_unique<Matcher>(masks));
    const size_t upto = ids.size() * static_cast<size_t>(r) / static_cast<size_t>(rows);
    for (size_t i = 0; i < upto; ++i) check(batch.back()->accept_token(ids[i]), "placing a row");
    ptrs.push_back(batch.back().get());
  }
  std::vector<uint32_t> batch_words(vocab->mask_words() * static_cast<size_t>(rows));
  std::vector<double> batch_us;
  for (int r = 0; r < 20 * repeats; ++r) {
    t = Clock::now();
    check(kiln::grammar::fill_masks(ptrs, batch_words, pool), "filling the batch's masks");
    batch_us.push_back(us_since(t));
  }

  // Every state up front, over the pool.
  auto full = std::make_shared<const MaskCache>(masks->automaton_ptr(), vocab);
  t = Clock::now();
  full->fill_all(pool);
  const double fill_all_ms = us_since(t) / 1000;

  nlohmann::json out = {
      {"schema", schema_path},
      {"document", document_path},
      {"document_tokens", ids.size()},
      {"vocabulary", {{"size", vocab_size}, {"tokens_with_bytes", vocab->token_count()}, {"trie_nodes", vocab->trie().size()},
                      {"build_ms", vocab_ms}}},
      {"automaton_states", states},
      {"compile", summary(compile_us)},
      {"compile_cached", summary(cached_us)},
      {"mask_per_token_cold", summary(cold)},
      {"mask_per_token_warm", summary(warm)},
      {"batch", {{"rows", rows}, {"threads", threads}, {"per_step", summary(batch_us)}}},
      {"fill_all", {{"states", full->filled()}, {"ms", fill_all_ms}, {"threads", threads}}},
      {"repeats", repeats},
  };
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
