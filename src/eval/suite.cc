#include "eval/suite.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/atomic_publish.h"
#include "core/json_text.h"
#include "core/names.h"
#include "core/regex.h"
#include "core/sha256.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<FieldError> check_messages(const json& m, const std::string& path) {
  if (!m.is_array() || m.empty()) return FieldError{path, "must be a non-empty array of {role, content}"};
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    if (!m[i].is_object()) return FieldError{p, "must be an object {role, content}"};
    auto role = m[i].find("role");
    if (role == m[i].end() || !role->is_string()) return FieldError{p + ".role", "role is required (a string)"};
    static const std::set<std::string> roles = {"system", "user", "assistant", "tool"};
    if (!roles.count(role->get<std::string>())) return FieldError{p + ".role", "unknown role '" + role->get<std::string>() + "'"};
    auto content = m[i].find("content");
    if (content == m[i].end() || !content->is_string()) return FieldError{p + ".content", "content is required (a string)"};
  }
  return std::nullopt;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Status check_suite_name(const std::string& name) { return check_folder_name("suite name", name); }

std::string EvalSuite::examples_jsonl() const {
  std::string out;
  for (const EvalExample& e : examples) {
    nlohmann::ordered_json line;
    line["messages"] = e.messages;
    line["expected"] = e.expected;
    line["scorer"] = e.scorer;
    out += line.dump() + "\n";
  }
  return out;
}

std::string EvalSuite::sha256() const { return sha256_hex(examples_jsonl()); }

json EvalSuite::manifest() const {
  return {{"kind", "kiln.eval_suite"}, {"version", 1},          {"name", name},
          {"description", description}, {"max_tokens", max_tokens}, {"chat_template_kwargs", chat_template_kwargs},
          {"scorer", scorer},           {"source", source},          {"holdout", holdout},
          {"created_at", created_at}};
}

json EvalSuite::summary() const {
  json counts = json::object();
  for (const EvalExample& e : examples) {
    const std::string t = scorer_type_name(e.resolved.type);
    counts[t] = counts.value(t, 0) + 1;
  }
  return {{"name", name},     {"description", description},
          {"examples", examples.size()}, {"max_tokens", max_tokens},
          {"chat_template_kwargs", chat_template_kwargs}, {"scorers", counts},
          {"sha256", sha256()}, {"created_at", created_at},
          {"source", source},   {"holdout", holdout}};
}

json EvalSuite::detail() const {
  json j = summary();
  json ex = json::array();
  for (size_t i = 0; i < examples.size(); ++i)
    ex.push_back({{"index", i}, {"messages", examples[i].messages}, {"expected", examples[i].expected},
                  {"scorer", examples[i].resolved.to_json()}});
  j["examples"] = ex;
  j["example_count"] = examples.size();
  return j;
}

std::optional<FieldError> resolve_scorers(EvalSuite& suite) {
  ScorerSpec suite_default;
  if (!suite.scorer.is_null())
    if (auto e = parse_scorer(suite.scorer, "scorer", suite_default)) return e;
  for (size_t i = 0; i < suite.examples.size(); ++i) {
    EvalExample& ex = suite.examples[i];
    const std::string p = "examples[" + std::to_string(i) + "]";
    if (!ex.scorer.is_null()) {
      if (auto e = parse_scorer(ex.scorer, p + ".scorer", ex.resolved)) return e;
    } else if (!suite.scorer.is_null()) {
      ex.resolved = suite_default;
    } else {
      ex.resolved = auto_scorer(ex.expected);
    }
    const ScorerSpec& s = ex.resolved;
    if (s.type == ScorerType::kRegex && s.pattern.empty()) {
      if (!ex.expected.is_string()) return FieldError{p + ".expected", "a regex scorer needs a string pattern"};
      if (Result<Regex> re = Regex::compile(ex.expected.get<std::string>()); !re.ok())
        return FieldError{p + ".expected", re.status().message()};
    }
    if (s.type == ScorerType::kNumericTolerance) {
      Result<std::optional<double>> n = expected_number(expected_text(ex.expected));
      if (!n.ok()) return FieldError{p + ".expected", n.status().message()};
      if (!*n) return FieldError{p + ".expected", "numeric_tolerance needs a number"};
    }
    if (s.type == ScorerType::kMultipleChoice) {
      Result<std::optional<char>> letter = chosen_letter(expected_text(ex.expected), s.choices);
      if (!letter.ok()) return FieldError{p + ".expected", letter.status().message()};
      if (!*letter) return FieldError{p + ".expected", "multiple_choice needs one of the letters " + s.choices};
    }
    if (s.type == ScorerType::kJsonSchema) {
      if (s.schema.is_null() && !ex.expected.is_object() && !ex.expected.is_boolean())
        return FieldError{p + ".expected", "json_schema needs a schema: the scorer's `schema`, or a schema object here"};
      continue;
    }
    if (s.type != ScorerType::kJsonValidity && !ex.expected.is_string() && !ex.expected.is_number())
      return FieldError{p + ".expected", "must be a string (or a number)"};
  }
  return std::nullopt;
}

std::optional<FieldError> parse_suite(const json& body, EvalSuite& out, bool* overwrite) {
  out = EvalSuite{};
  if (!body.is_object()) return FieldError{"", "the body must be a JSON object"};
  static const std::set<std::string> known = {"name", "description", "scorer", "max_tokens",
                                              "chat_template_kwargs", "overwrite", "examples"};
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!known.count(it.key())) return FieldError{it.key(), "unknown field"};
  auto name = body.find("name");
  if (name == body.end() || !name->is_string()) return FieldError{"name", "name is required (a string)"};
  if (Status st = check_suite_name(name->get<std::string>()); !st.ok()) return FieldError{"name", st.message()};
  out.name = name->get<std::string>();
  if (auto d = body.find("description"); d != body.end() && !d->is_null()) {
    if (!d->is_string()) return FieldError{"description", "must be a string"};
    out.description = d->get<std::string>();
  }
  if (auto m = body.find("max_tokens"); m != body.end() && !m->is_null()) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > 32768)
      return FieldError{"max_tokens", "must be an integer in [1, 32768]"};
    out.max_tokens = m->get<int64_t>();
  }
  if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) return FieldError{"chat_template_kwargs", "must be an object"};
    out.chat_template_kwargs = *k;
  }
  if (auto o = body.find("overwrite"); o != body.end() && !o->is_null()) {
    if (!o->is_boolean()) return FieldError{"overwrite", "must be a boolean"};
    if (overwrite) *overwrite = o->get<bool>();
  }
  if (auto s = body.find("scorer"); s != body.end()) out.scorer = *s;
  auto ex = body.find("examples");
  if (ex == body.end() || !ex->is_array() || ex->empty()) return FieldError{"examples", "must be a non-empty array"};
  for (size_t i = 0; i < ex->size(); ++i) {
    const json& e = (*ex)[i];
    const std::string p = "examples[" + std::to_string(i) + "]";
    if (!e.is_object()) return FieldError{p, "must be an object {messages | prompt, expected, scorer?}"};
    for (auto it = e.begin(); it != e.end(); ++it)
      if (it.key() != "messages" && it.key() != "prompt" && it.key() != "expected" && it.key() != "scorer")
        return FieldError{p + "." + it.key(), "unknown field"};
    EvalExample x;
    const bool has_m = e.contains("messages"), has_p = e.contains("prompt");
    if (has_m && has_p) return FieldError{p + ".prompt", "give messages or prompt, not both"};
    if (has_p) {
      if (!e["prompt"].is_string() || e["prompt"].get<std::string>().empty())
        return FieldError{p + ".prompt", "must be a non-empty string"};
      x.messages = json::array({{{"role", "user"}, {"content", e["prompt"]}}});
    } else {
      if (!has_m) return FieldError{p + ".messages", "messages (or prompt) is required"};
      if (auto err = check_messages(e["messages"], p + ".messages")) return err;
      x.messages = e["messages"];
    }
    if (!e.contains("expected") || e["expected"].is_null()) return FieldError{p + ".expected", "expected is required"};
    x.expected = e["expected"];
    if (x.expected.is_number()) x.expected = x.expected.dump();  // a number is kept as its text
    if (e.contains("scorer")) x.scorer = e["scorer"];
    out.examples.push_back(std::move(x));
  }
  out.created_at = now_seconds();
  return resolve_scorers(out);
}

Status SuiteStore::save(const EvalSuite& suite, bool overwrite) {
  KILN_RETURN_IF_ERROR(check_suite_name(suite.name));
  KILN_ASSIGN_OR_RETURN(StagedFolder staged, StagedFolder::create(dir_, suite.name));
  KILN_RETURN_IF_ERROR(write_file_atomically(staged.path() + "/manifest.json", suite.manifest().dump(2) + "\n"));
  KILN_RETURN_IF_ERROR(write_file_atomically(staged.path() + "/examples.jsonl", suite.examples_jsonl()));
  auto published = staged.publish(overwrite ? PublishMode::kReplace : PublishMode::kCreateNew);
  if (!published.ok() && published.status().code() == ErrorCode::kFailedPrecondition)
    return failed_precondition("suite '" + suite.name + "' exists (give overwrite: true to replace it)");
  return published.status();
}

Result<EvalSuite> SuiteStore::load(const std::string& name) const {
  if (!check_suite_name(name).ok()) return not_found("no eval suite '" + name + "'");
  const fs::path d = fs::path(dir_) / name;
  if (!fs::is_directory(d)) return not_found("no eval suite '" + name + "'");
  KILN_ASSIGN_OR_RETURN(std::string manifest_bytes, read_file((d / "manifest.json").string()));
  KILN_ASSIGN_OR_RETURN(std::string lines, read_file((d / "examples.jsonl").string()));
  json m = parse_json(manifest_bytes, "manifest.json").value_or(json());
  if (!m.is_object()) return internal_error(d.string() + "/manifest.json is not a JSON object");
  EvalSuite s;
  s.name = name;
  s.description = m.value("description", "");
  s.max_tokens = m.value("max_tokens", int64_t{64});
  s.chat_template_kwargs = m.value("chat_template_kwargs", json::object());
  s.scorer = m.value("scorer", json());
  s.source = m.value("source", "api");
  s.holdout = m.value("holdout", json());
  s.created_at = m.value("created_at", 0.0);
  std::istringstream in(lines);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    json e = parse_json(line, "examples.jsonl").value_or(json());
    if (!e.is_object() || !e.contains("messages") || !e.contains("expected"))
      return internal_error(d.string() + "/examples.jsonl line " + std::to_string(n) + " is not {messages, expected, scorer}");
    s.examples.push_back({e["messages"], e["expected"], e.value("scorer", json()), {}});
  }
  if (auto err = resolve_scorers(s)) return internal_error(d.string() + ": " + err->field + ": " + err->message);
  return s;
}

std::vector<EvalSuite> SuiteStore::list() const {
  std::vector<EvalSuite> out;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n[0] != '.') names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    auto s = load(n);
    if (s.ok()) out.push_back(std::move(*s));
    else std::fprintf(stderr, "kiln: eval suite %s skipped: %s\n", n.c_str(), s.status().to_string().c_str());
  }
  return out;
}

Status SuiteStore::remove(const std::string& name) {
  if (!check_suite_name(name).ok() || !fs::is_directory(fs::path(dir_) / name))
    return not_found("no eval suite '" + name + "'");
  return remove_published(dir_, name);
}

}  // namespace kiln
