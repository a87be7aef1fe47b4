// The encode pipeline (added tokens on raw text, normalise, added tokens on normalised text,
// pre-tokenize, BPE) and decode through per-id byte strings.
#include "tokenizer/tokenizer.h"
#include "core/json_text.h"

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/thread_pool.h"
#include "tokenizer/utf8.h"

namespace kiln {

struct Tokenizer::Scratch {
  uint64_t serial = 0;
  BpeModel::Scratch bpe;
  std::vector<TextPiece> raw_pieces, normalized_pieces;
  std::vector<std::string_view> words;
  std::deque<std::string> owned;
};

namespace {

std::atomic<uint64_t> next_serial{1};

enum IdKind : uint8_t { kUnknownId = 0, kModelId = 1, kAddedId = 2, kSpecialId = 3 };

Status check_unsupported_top_level(const nlohmann::json& config) {
  for (const char* key : {"truncation", "padding"}) {
    if (config.contains(key) && !config[key].is_null()) {
      return unsupported(std::string(key) + " " + config[key].dump() + " is not supported (kiln never truncates or pads)");
    }
  }
  if (config.contains("post_processor") && !config["post_processor"].is_null()) {
    const auto& pp = config["post_processor"];
    const std::string type = pp.is_object() && pp.contains("type") && pp["type"].is_string() ? pp["type"].get<std::string>() : pp.dump();
    // ByteLevel post-processing only adjusts offsets; it never changes ids.
    if (type != "ByteLevel") return unsupported("post_processor type \"" + type + "\" is not supported (supported: ByteLevel)");
  }
  return {};
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return not_found("tokenizer file " + file.string() + " cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto config = parse_json(buffer.str(), file.string());
  if (!config.ok()) return format_error(config.status().message());
  return from_json(*config, file.string());
}

Result<Tokenizer> Tokenizer::from_json(const nlohmann::json& config, const std::string& source) {
  auto fail = [&](const Status& s) { return s.with_context("loading " + source); };
  if (!config.is_object()) return fail(format_error("expected a JSON object"));
  if (Status s = check_unsupported_top_level(config); !s.ok()) return fail(s);
  Tokenizer t;
  t.serial_ = next_serial.fetch_add(1);
  auto get = [&](const char* key) { return config.contains(key) ? config[key] : nlohmann::json(); };

  auto normalizer = Normalizer::from_json(get("normalizer"));
  if (!normalizer.ok()) return fail(normalizer.status());
  t.normalizer_ = std::move(normalizer).value();

  auto pre = PreTokenizer::from_json(get("pre_tokenizer"));
  if (!pre.ok()) return fail(pre.status());
  t.pre_tokenizer_ = std::move(pre).value();

  if (!config.contains("model")) return fail(format_error("no \"model\""));
  auto model = BpeModel::from_json(config["model"]);
  if (!model.ok()) return fail(model.status());
  t.model_ = std::move(model).value();
  if (t.pre_tokenizer_.byte_level() && !t.model_.byte_level_complete()) {
    return fail(format_error("the ByteLevel pre-tokenizer needs all 256 byte characters in the vocabulary"));
  }
  if (!t.pre_tokenizer_.byte_level() && !t.model_.has_unk()) {
    // The tokenizers library would fail at encode time on a character outside the vocabulary.
    return fail(unsupported("a BPE model without ByteLevel pre-tokenization and without unk_token is not supported"));
  }

  auto added = AddedVocabulary::from_json(get("added_tokens"), t.normalizer_, t.model_.vocab());
  if (!added.ok()) return fail(added.status());
  t.added_ = std::move(added).value();

  auto decoder = Decoder::from_json(get("decoder"));
  if (!decoder.ok()) return fail(decoder.status());
  t.decoder_ = std::move(decoder).value();

  size_t size = t.model_.id_limit();
  for (const auto& a : t.added_.tokens()) size = std::max(size, static_cast<size_t>(a.id) + 1);
  t.id_bytes_.resize(size);
  t.id_kind_.assign(size, kUnknownId);
  for (size_t id = 0; id < size; ++id) {
    if (const std::string* token = t.model_.token_of(static_cast<TokenId>(id))) {
      t.id_bytes_[id] = t.decoder_.token_bytes(*token);
      t.id_kind_[id] = kModelId;
    }
  }
  // Added tokens take precedence over model tokens with the same id.
  for (const auto& a : t.added_.tokens()) {
    t.id_bytes_[a.id] = t.decoder_.token_bytes(a.content);
    t.id_kind_[a.id] = a.special ? kSpecialId : kAddedId;
  }
  return t;
}

Tokenizer::Scratch& Tokenizer::scratch_for(uint64_t serial) {
  thread_local Scratch scratch;
  if (scratch.serial != serial) {
    scratch.bpe.cache.clear();
    scratch.serial = serial;
  }
  return scratch;
}

void Tokenizer::encode_segment(std::string_view text, Scratch& scratch, std::vector<TokenId>& ids) const {
  scratch.words.clear();
  scratch.owned.clear();
  pre_tokenizer_.split(text, scratch.words, scratch.owned);
  for (std::string_view word : scratch.words) {
    // Cannot fail: byte-level vocabularies are complete (from_json checks), and other models
    // either have an unk token or were rejected at load.
    model_.tokenize(word, pre_tokenizer_.byte_level(), scratch.bpe, ids);
  }
}

void Tokenizer::encode_into(std::string_view input, SpecialTokens special, Scratch& scratch,
                            std::vector<TokenId>& ids) const {
  std::string sanitized;
  std::string_view text = input;
  if (!utf8::is_valid(input)) {
    sanitized = utf8::sanitize(input);
    text = sanitized;
  }
  auto& raw = scratch.raw_pieces;
  raw.clear();
  added_.split(text, AddedVocabulary::Pass::kRaw, special, raw);
  for (size_t r = 0; r < raw.size(); ++r) {
    const TextPiece piece = raw[r];
    if (piece.token >= 0) {
      ids.push_back(piece.token);
      continue;
    }
    std::string_view segment = text.substr(piece.begin, piece.end - piece.begin);
    std::string normalized;
    if (!normalizer_.is_identity()) {
      normalized = normalizer_.normalize(segment);
      segment = normalized;
    }
    auto& inner = scratch.normalized_pieces;
    inner.clear();
    added_.split(segment, AddedVocabulary::Pass::kNormalized, special, inner);
    for (size_t i = 0; i < inner.size(); ++i) {
      const TextPiece p = inner[i];
      if (p.token >= 0) {
        ids.push_back(p.token);
      } else {
        encode_segment(segment.substr(p.begin, p.end - p.begin), scratch, ids);
      }
    }
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, SpecialTokens special) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, special, scratch_for(serial_), ids);
  return ids;
}

std::vector<std::vector<TokenId>> Tokenizer::encode_batch(std::span<const std::string> texts,
                                                          SpecialTokens special) const {
  std::vector<std::vector<TokenId>> out(texts.size());
  default_thread_pool().parallel_for(static_cast<int64_t>(texts.size()), 1, [&](int64_t begin, int64_t end, int) {
    Scratch& scratch = scratch_for(serial_);
    for (int64_t i = begin; i < end; ++i) encode_into(texts[i], special, scratch, out[i]);
  });
  return out;
}

Status Tokenizer::append_token_bytes(TokenId id, SpecialTokenOutput special, bool first, std::string& out) const {
  if (id < 0 || static_cast<size_t>(id) >= id_kind_.size() || id_kind_[id] == kUnknownId) {
    return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary (size " +
                            std::to_string(id_kind_.size()) + ")");
  }
  if (special == SpecialTokenOutput::kSkip && id_kind_[id] == kSpecialId) return {};
  if (!first) out.append(decoder_.separator());
  out.append(id_bytes_[id]);
  return {};
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids, SpecialTokenOutput special) const {
  std::string bytes;
  bool first = true;
  for (TokenId id : ids) {
    KILN_RETURN_IF_ERROR(append_token_bytes(id, special, first, bytes));
    if (!(special == SpecialTokenOutput::kSkip && id_kind_[id] == kSpecialId)) first = false;
  }
  return utf8::sanitize(bytes);
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = added_.find_by_content(token)) return a->id;
  auto it = model_.vocab().find(token);
  if (it == model_.vocab().end()) return std::nullopt;
  return it->second;
}

Result<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (const AddedToken* a = added_.find_by_id(id)) return a->content;
  if (const std::string* t = model_.token_of(id)) return *t;
  return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary");
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < id_kind_.size() && id_kind_[id] == kSpecialId;
}

}  // namespace kiln
