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
