// Other tokenizer.json components, checked by patching the Qwen3 tokenizer.json the way
// tools/tokenizer/oracle_hf_tokenizers.js (variants) did and comparing ids with HF tokenizers;
// plus load errors that name every unsupported component.
#include <gtest/gtest.h>

#include <fstream>

#include "qwen3_fixture.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace kiln {
namespace {

using testing::corpus;
using testing::fixture_path;
using testing::qwen3_dir;

const nlohmann::json& qwen3_json() {
  static const nlohmann::json* j = [] {
    std::ifstream in(qwen3_dir() + "/tokenizer.json");
    return new nlohmann::json(in.good() ? nlohmann::json::parse(in) : nlohmann::json());
  }();
  return *j;
}

// The same patch semantics as applyPatch() in the oracle script.
nlohmann::json apply_patch(const nlohmann::json& base, const nlohmann::json& patch) {
  nlohmann::json out = base;
  for (const char* key : {"normalizer", "pre_tokenizer"}) {
    if (patch.contains(key)) out[key] = patch[key];
  }
  if (patch.contains("model")) out["model"].update(patch["model"]);
  if (patch.value("merges_as_strings", false)) {
    for (auto& m : out["model"]["merges"]) {
      if (m.is_array()) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
    }
  }
  if (patch.contains("added_tokens")) {
    for (auto& t : out["added_tokens"]) {
      if (patch["added_tokens"].contains(t["content"].get<std::string>())) t.update(patch["added_tokens"][t["content"].get<std::string>()]);
    }
  }
  return out;
}

TEST(TokenizerVariants, EachVariantMatchesHfTokenizers) {
  ASSERT_FALSE(qwen3_json().is_null()) << "the Qwen3 tokenizer is missing; run scripts/fetch-tokenizer";
  std::ifstream in(fixture_path("variants_expected.json"));
  const auto variants = nlohmann::json::parse(in);
  const size_t stride = variants[0]["stride"];
  const auto all = corpus();
  std::vector<std::string> texts;
  for (size_t i = 0; i < all.size(); i += stride) texts.push_back(all[i]);
  ASSERT_GE(variants.size(), 17u);
  for (size_t v = 1; v < variants.size(); ++v) {
    const std::string name = variants[v]["name"];
    auto tok = Tokenizer::from_json(apply_patch(qwen3_json(), variants[v]["patch"]), name);
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status().to_string();
    ASSERT_EQ(variants[v]["ids"].size(), texts.size()) << name;
    size_t mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto want = variants[v]["ids"][i].get<std::vector<TokenId>>();
      if (tok->encode(texts[i]) != want && ++mismatches <= 3) {
        ADD_FAILURE() << name << ": corpus line " << i * stride + 1 << " differs";
      }
    }
    EXPECT_EQ(mismatches, 0u) << name;
  }
}

// A minimal byte-level tokenizer.json: the 256 byte-alphabet characters plus "ab" (one merge).
nlohmann::json tiny_model() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(ByteLevelAlphabet::get().utf8_of(static_cast<uint8_t>(b)))] = b;
  vocab["ab"] = 256;
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}};
}

nlohmann::json tiny(const nlohmann::json& overrides = nlohmann::json::object()) {
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", tiny_model()},
  };
  j.update(overrides);
  return j;
}

nlohmann::json model_with(const char* key, const nlohmann::json& value) {
  nlohmann::json m = tiny_model();
  m[key] = value;
  return m;
}

TEST(TokenizerLoad, TinyByteLevelTokenizerWorks) {
  auto tok = Tokenizer::from_json(tiny(), "tiny");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("ab"), (std::vector<TokenId>{256}));
  EXPECT_EQ(tok->decode(tok->encode("xab\xE2\x82\xAC")).value(), "xab\xE2\x82\xAC");
}

struct UnsupportedCase {
  const char* component;
  nlohmann::json overrides;
};

TEST(TokenizerLoad, UnsupportedComponentsAreErrorsNamingThem) {
  const UnsupportedCase cases[] = {
      {"Lowercase", {{"normalizer", {{"type", "Lowercase"}}}}},
      {"Precompiled", {{"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}}}}},
      {"Metaspace", {{"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "_"}}}}},
      {"Whitespace", {{"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}}}}}}},
      {"Unigram", {{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::object()}}}}},
      {"WordPiece", {{"model", {{"type", "WordPiece"}, {"vocab", nlohmann::json::object()}}}}},
      {"byte_fallback", {{"model", model_with("byte_fallback", true)}}},
      {"dropout", {{"model", model_with("dropout", 0.1)}}},
      {"continuing_subword_prefix", {{"model", model_with("continuing_subword_prefix", "##")}}},
      {"Metaspace", {{"decoder", {{"type", "Metaspace"}}}}},
      {"TemplateProcessing", {{"post_processor", {{"type", "TemplateProcessing"}}}}},
      {"truncation", {{"truncation", {{"max_length", 8}}}}},
      {"Shuffle", {{"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Shuffle"}}}}},
  };
  for (const auto& c : cases) {
    auto tok = Tokenizer::from_json(tiny(c.overrides), "tiny.json");
    ASSERT_FALSE(tok.ok()) << c.component << " loaded";
    const std::string msg = tok.status().message();
    EXPECT_NE(msg.find(c.component), std::string::npos) << msg;
    EXPECT_NE(msg.find("tiny.json"), std::string::npos) << msg;
  }
}

// Found by the tokenizer.json fuzz target: an id of 2^31 - 1 overflowed (and any id in the
// billions asked for gigabytes of tables), and a flag that was not a boolean threw out of the loader.
TEST(TokenizerLoad, HugeVocabIdsAndNonBooleanOptionsAreErrorsNamingThem) {
  nlohmann::json huge = tiny_model();
  huge["vocab"]["zz"] = 2147483647;
  nlohmann::json past = tiny_model();
  past["vocab"]["zz"] = kMaxTokenId + 1;
  const std::pair<nlohmann::json, std::string> cases[] = {
      {{{"model", huge}}, "token \"zz\" has id 2147483647, expected an integer in [0, 16777215]"},
      {{{"model", past}}, "token \"zz\" has id 16777216, expected an integer in [0, 16777215]"},
      {{{"model", model_with("ignore_merges", "yes")}}, "\"ignore_merges\" must be true or false, got \"yes\""},
      {{{"added_tokens", {{{"id", 300}, {"content", "<x>"}, {"special", "yes"}}}}},
       "added_tokens[0].special: expected true or false, got \"yes\""},
      {{{"added_tokens", {{{"id", 300}, {"content", "<x>"}, {"normalized", 1}}}}},
       "added_tokens[0].normalized: expected true or false, got 1"},
  };
  for (const auto& [overrides, expect] : cases) {
    Result<Tokenizer> tok = internal_error("not loaded");
    ASSERT_NO_THROW(tok = Tokenizer::from_json(tiny(overrides), "tiny.json")) << expect;
    ASSERT_FALSE(tok.ok()) << expect;
    EXPECT_NE(tok.status().message().find(expect), std::string::npos) << tok.status().message();
  }
}

// Found by the tokenizer.json fuzz target: the id tables were sized by the number of vocabulary
// entries, so a vocabulary that skips ids encoded ids that decode then refused.
TEST(TokenizerLoad, IdsBeyondTheEntryCountDecodeWhatEncodeGives) {
  nlohmann::json model = tiny_model();
  model["vocab"]["ab"] = 300;  // 257 entries, the largest id 300
  auto tok = Tokenizer::from_json(tiny({{"model", model}}), "tiny.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("ab"), (std::vector<TokenId>{300}));
  EXPECT_EQ(tok->vocab_size(), 301u);
  auto text = tok->decode(std::vector<TokenId>{300});
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "ab");
}

TEST(TokenizerLoad, BadRegexIsAnErrorNamingThePattern) {
  auto tok = Tokenizer::from_json(
      tiny({{"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}}}), "tiny");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("(unclosed"), std::string::npos) << tok.status().message();
}

TEST(TokenizerLoad, MissingFileIsNotFound) {
  auto tok = Tokenizer::load("/nonexistent/tokenizer/dir");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(tok.status().message().find("/nonexistent/tokenizer/dir"), std::string::npos);
}

}  // namespace
}  // namespace kiln
