#include "eval/scorer.h"

#include "eval/json_schema_check.h"
#include "core/json_text.h"
#include "core/regex.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln {

namespace {

using json = nlohmann::json;

// One grammar for every number the scorers read: sign, digits (optionally in ,-separated groups
// of three), fraction, exponent. ".5" counts; "1,2" is two numbers. ASCII digits only: Unicode
// \d would take other scripts' digits, which strtod cannot read.
const Regex& number_regex() {
  static const Regex re =
      Regex::compile(R"([+-]?(?:(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
          .value();
  return re;
}

// An expected answer that is one choice letter A-E: "B", "(B)", "B.", "B)".
const Regex& one_letter_regex() {
  static const Regex re = Regex::compile(R"(\(?[A-E][.)]?)").value();
  return re;
}

RegexOptions cased(RegexCase case_mode) {
  RegexOptions o;
  o.case_mode = case_mode;
  return o;
}

double to_double(std::string s) {
  std::string t;
  for (char c : s)
    if (c != ',') t.push_back(c);
  return std::strtod(t.c_str(), nullptr);
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string drop_trailing_period(std::string s) {
  if (!s.empty() && s.back() == '.') s.pop_back();
  return trim(s);
}

// The output without a surrounding ``` fence (```json ... ```), as models often wrap JSON.
std::string unfence(const std::string& s) {
  std::string t = trim(s);
  if (t.rfind("```", 0) != 0) return t;
  size_t nl = t.find('\n');
  if (nl == std::string::npos) return t;
  t = t.substr(nl + 1);
  size_t end = t.rfind("```");
  if (end != std::string::npos) t = t.substr(0, end);
  return trim(t);
}

// The JSON value an expected answer stands for: a string that parses as an object or array is
// that value; any other non-string JSON value is itself.
std::optional<json> expected_structure(const json& expected) {
  if (expected.is_null()) return std::nullopt;
  if (!expected.is_string()) return json(expected);
  auto v = parse_json(trim(expected.get<std::string>()), "expected");
  if (!v.ok() || !(v->is_object() || v->is_array())) return std::nullopt;
  return std::move(*v);
}

std::optional<ScorerType> type_from_name(const std::string& n) {
  static const std::pair<const char*, ScorerType> names[] = {
      {"exact", ScorerType::kExact}, {"contains", ScorerType::kContains}, {"regex", ScorerType::kRegex},
      {"numeric_tolerance", ScorerType::kNumericTolerance}, {"multiple_choice", ScorerType::kMultipleChoice},
      {"json_validity", ScorerType::kJsonValidity}, {"json_schema", ScorerType::kJsonSchema}, {"all", ScorerType::kAll}, {"any", ScorerType::kAny}};
  for (const auto& [name, t] : names)
    if (n == name) return t;
  return std::nullopt;
}

}  // namespace

const char* scorer_type_name(ScorerType t) {
  switch (t) {
    case ScorerType::kExact: return "exact";
    case ScorerType::kContains: return "contains";
    case ScorerType::kRegex: return "regex";
    case ScorerType::kNumericTolerance: return "numeric_tolerance";
    case ScorerType::kMultipleChoice: return "multiple_choice";
    case ScorerType::kJsonValidity: return "json_validity";
    case ScorerType::kJsonSchema: return "json_schema";
    case ScorerType::kAll: return "all";
    case ScorerType::kAny: return "any";
  }
  return "?";
}

json ScorerSpec::to_json() const {
  json j = {{"type", scorer_type_name(type)}};
  if (case_sensitive) j["case_sensitive"] = *case_sensitive;
  switch (type) {
    case ScorerType::kRegex:
      if (!pattern.empty()) j["pattern"] = pattern;
      break;
    case ScorerType::kNumericTolerance:
      j["tolerance"] = tolerance;
      j["relative"] = relative;
      break;
    case ScorerType::kMultipleChoice: j["choices"] = choices; break;
    case ScorerType::kJsonValidity:
      if (require_match) j["require_match"] = *require_match;
      break;
    case ScorerType::kJsonSchema:
      if (!schema.is_null()) j["schema"] = schema;
      break;
    case ScorerType::kAll:
    case ScorerType::kAny: {
      json of_j = json::array();
      for (size_t i = 0; i < of.size(); ++i) {
        json m = of[i].to_json();
        if (of_expected[i]) m["expected"] = *of_expected[i];
        of_j.push_back(m);
      }
      j["of"] = of_j;
      break;
    }
    default: break;
  }
  return j;
}

std::optional<FieldError> parse_scorer(const json& j, const std::string& path, ScorerSpec& out) {
  out = ScorerSpec{};
  if (j.is_string()) {
    auto t = type_from_name(j.get<std::string>());
    if (!t) return FieldError{path, "unknown scorer '" + j.get<std::string>() + "'"};
    if (*t == ScorerType::kAll || *t == ScorerType::kAny)
      return FieldError{path, std::string(scorer_type_name(*t)) + " needs an object with `of`"};
    out.type = *t;
    return std::nullopt;
  }
  if (!j.is_object()) return FieldError{path, "a scorer is a name or an object {type, ...}"};
  auto type_it = j.find("type");
  if (type_it == j.end() || !type_it->is_string()) return FieldError{path + ".type", "type is required (a scorer name)"};
  auto t = type_from_name(type_it->get<std::string>());
  if (!t) return FieldError{path + ".type", "unknown scorer '" + type_it->get<std::string>() + "'"};
  out.type = *t;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const std::string p = path + "." + k;
    if (k == "type") continue;
    if (k == "case_sensitive" && (out.type == ScorerType::kExact || out.type == ScorerType::kContains ||
                                  out.type == ScorerType::kRegex)) {
      if (!v.is_boolean()) return FieldError{p, "must be a boolean"};
      out.case_sensitive = v.get<bool>();
    } else if (k == "pattern" && out.type == ScorerType::kRegex) {
      if (!v.is_string() || v.get<std::string>().empty()) return FieldError{p, "must be a non-empty string"};
      if (Result<Regex> re = Regex::compile(v.get<std::string>()); !re.ok())
        return FieldError{p, re.status().message()};
      out.pattern = v.get<std::string>();
    } else if ((k == "tolerance" || k == "relative") && out.type == ScorerType::kNumericTolerance) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        return FieldError{p, "must be a finite number >= 0"};
      (k == "tolerance" ? out.tolerance : out.relative) = v.get<double>();
    } else if (k == "choices" && out.type == ScorerType::kMultipleChoice) {
      if (!v.is_string() || v.get<std::string>().empty()) return FieldError{p, "must be a non-empty string of letters"};
      for (char c : v.get<std::string>())
        if (!std::isupper(static_cast<unsigned char>(c))) return FieldError{p, "must hold capital letters only"};
      out.choices = v.get<std::string>();
    } else if (k == "require_match" && out.type == ScorerType::kJsonValidity) {
      if (!v.is_boolean()) return FieldError{p, "must be a boolean"};
      out.require_match = v.get<bool>();
    } else if (k == "schema" && out.type == ScorerType::kJsonSchema) {
      if (!v.is_object() && !v.is_boolean()) return FieldError{p, "must be a JSON Schema (an object or a boolean)"};
      out.schema = v;
    } else if (k == "of" && (out.type == ScorerType::kAll || out.type == ScorerType::kAny)) {
      if (!v.is_array() || v.empty()) return FieldError{p, "must be a non-empty array of scorers"};
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string mp = p + "[" + std::to_string(i) + "]";
        json member = v[i];
        std::optional<json> own;
        if (member.is_object() && member.contains("expected")) {
          own = member["expected"];
          member.erase("expected");
        }
        ScorerSpec m;
        if (auto e = parse_scorer(member, mp, m)) return e;
        if (m.type == ScorerType::kRegex && m.pattern.empty() && own) {
          if (!own->is_string()) return FieldError{mp + ".expected", "a regex scorer needs a string pattern"};
          if (Result<Regex> re = Regex::compile(own->get<std::string>()); !re.ok())
            return FieldError{mp + ".expected", re.status().message()};
        }
        out.of.push_back(std::move(m));
        out.of_expected.push_back(std::move(own));
      }
    } else {
      return FieldError{p, "unknown field for scorer " + std::string(scorer_type_name(out.type))};
    }
  }
  if ((out.type == ScorerType::kAll || out.type == ScorerType::kAny) && out.of.empty())
    return FieldError{path + ".of", "is required: the scorers to combine"};
  return std::nullopt;
}

std::string expected_text(const json& expected) {
  if (expected.is_string()) return expected.get<std::string>();
  if (expected.is_null()) return "";
  return expected.dump();
}

std::string strip_reasoning(const std::string& output) {
  size_t close = output.rfind("</think>");
  if (close != std::string::npos) return output.substr(close + 8);
  // An open block that never closed: the whole output is reasoning, there is no answer.
  if (trim(output).rfind("<think>", 0) == 0) return "";
  return output;
}

std::string normalize_text(const std::string& s, bool case_sensitive) {
  std::string out;
  bool space = false;
  for (char c : trim(s)) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(case_sensitive ? c : static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

Result<std::optional<double>> parse_number_exact(const std::string& s) {
  const std::string t = trim(s);
  KILN_ASSIGN_OR_RETURN(bool whole, number_regex().full_match(t));
  if (!whole) return std::optional<double>();
  return std::optional<double>(to_double(t));
}

Result<std::optional<double>> last_number(const std::string& s) {
  std::optional<double> last;
  KILN_RETURN_IF_ERROR(
      number_regex().for_each_match(s, [&](size_t b, size_t e) { last = to_double(s.substr(b, e - b)); }));
  return last;
}

Result<std::optional<double>> expected_number(const std::string& expected) {
  KILN_ASSIGN_OR_RETURN(std::optional<double> whole, parse_number_exact(expected));
  if (whole) return whole;
  return last_number(expected);
}

Result<std::optional<char>> chosen_letter(const std::string& output, const std::string& choices) {
  const std::string set = "[" + choices + "]";
  const std::string t = trim(output);
  auto upper = [](char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); };
  // The letter group 1 captured in the last match of `pattern` in t. Every pattern here consumes
  // its letter, so each search starts where the previous match ended.
  auto last_match = [&t](const std::string& pattern, RegexCase case_mode) -> Result<std::optional<char>> {
    KILN_ASSIGN_OR_RETURN(Regex re, Regex::compile(pattern, cased(case_mode)));
    std::optional<char> last;
    for (size_t pos = 0;;) {
      KILN_ASSIGN_OR_RETURN(std::optional<RegexMatch> m, re.find(t, pos));
      if (!m) return last;
      last = t[m->spans[1].begin];
      pos = m->end();
    }
  };
  // 1. The whole output is one letter: "B", "b", "(B)", "B.", "B)".
  KILN_ASSIGN_OR_RETURN(std::optional<char> single, last_match("\\A\\(?([A-Za-z])[.)]?\\z", RegexCase::kSensitive));
  if (single && choices.find(upper(*single)) != std::string::npos) return std::optional<char>(upper(*single));
  // 2. After "answer is" / "answer:" (the model's own statement of its choice).
  KILN_ASSIGN_OR_RETURN(std::optional<char> stated,
                        last_match("answer(?:\\s+is)?\\s*[:\\-]?\\s*\\(?(" + set + ")\\b", RegexCase::kInsensitive));
  if (stated && choices.find(upper(*stated)) != std::string::npos) return std::optional<char>(upper(*stated));
  // 3. A letter in parentheses: "(B)"; 4. a standalone capital letter word.
  KILN_ASSIGN_OR_RETURN(std::optional<char> parenthesised, last_match("\\((" + set + ")\\)", RegexCase::kSensitive));
  if (parenthesised) return parenthesised;
  return last_match("\\b(" + set + ")\\b", RegexCase::kSensitive);
}

ScorerSpec auto_scorer(const json& expected) {
  ScorerSpec s;
  if (expected_structure(expected)) {
    s.type = ScorerType::kJsonValidity;
  } else if (parse_number_exact(expected_text(expected)).value_or(std::nullopt)) {
    s.type = ScorerType::kNumericTolerance;
  } else if (one_letter_regex().full_match(trim(expected_text(expected))).value_or(false)) {
    s.type = ScorerType::kMultipleChoice;
  } else {
    s.type = ScorerType::kExact;
  }
  return s;
}

ScoreResult score(const ScorerSpec& spec, const json& expected, const std::string& raw_output) {
  const std::string output = strip_reasoning(raw_output);
  const std::string exp = expected_text(expected);
  switch (spec.type) {
    case ScorerType::kExact: {
      const bool cs = spec.case_sensitive.value_or(false);
      const std::string a = drop_trailing_period(normalize_text(output, cs));
      const std::string b = drop_trailing_period(normalize_text(exp, cs));
      if (a == b) return {true, "exact match"};
      return {false, "expected \"" + b + "\", got \"" + a.substr(0, 200) + "\""};
    }
    case ScorerType::kContains: {
      const bool cs = spec.case_sensitive.value_or(false);
      const std::string a = normalize_text(output, cs), b = normalize_text(exp, cs);
      size_t at = a.find(b);
      if (b.empty()) return {false, "expected is empty"};
      if (at != std::string::npos) return {true, "found \"" + b + "\" at " + std::to_string(at)};
      return {false, "\"" + b + "\" not found"};
    }
    case ScorerType::kRegex: {
      const std::string pattern = spec.pattern.empty() ? exp : spec.pattern;
      const RegexCase case_mode = spec.case_sensitive.value_or(true) ? RegexCase::kSensitive : RegexCase::kInsensitive;
      Result<Regex> re = Regex::compile(pattern, cased(case_mode));
      if (!re.ok()) return {false, re.status().message()};
      // A limit hit is this example's failure, not the eval's: the reason names the limit.
      Result<std::optional<RegexMatch>> m = re->find(output);
      if (!m.ok()) return {false, m.status().message()};
      if (!m->has_value()) return {false, "no match for /" + pattern + "/"};
      const RegexMatch& hit = **m;
      return {true, "matched \"" + output.substr(hit.begin(), hit.end() - hit.begin()).substr(0, 200) + "\" at " +
                        std::to_string(hit.begin())};
    }
    case ScorerType::kNumericTolerance: {
      Result<std::optional<double>> want = expected_number(exp);
      if (!want.ok()) return {false, want.status().message()};
      if (!*want) return {false, "expected \"" + exp + "\" is not a number"};
      Result<std::optional<double>> got = last_number(output);
      if (!got.ok()) return {false, got.status().message()};
      if (!*got) return {false, "no number in output"};
      const double w = **want, g = **got;
      const double diff = std::fabs(g - w);
      const double bound = spec.tolerance + spec.relative * std::fabs(w);
      const bool ok = diff <= bound;
      return {ok, "expected " + fmt(w) + ", read " + fmt(g) + " (|diff| " + fmt(diff) + (ok ? " <= " : " > ") +
                      fmt(bound) + ")"};
    }
    case ScorerType::kMultipleChoice: {
      Result<std::optional<char>> want = chosen_letter(exp, spec.choices);
      if (!want.ok()) return {false, want.status().message()};
      if (!*want) return {false, "expected \"" + exp + "\" is not one of " + spec.choices};
      Result<std::optional<char>> got = chosen_letter(output, spec.choices);
      if (!got.ok()) return {false, got.status().message()};
      const char w = **want;
      if (!*got) return {false, "no choice found, expected " + std::string(1, w)};
      const char g = **got;
      if (g == w) return {true, "chose " + std::string(1, g)};
      return {false, "chose " + std::string(1, g) + ", expected " + std::string(1, w)};
    }
    case ScorerType::kJsonValidity: {
      const std::string body = unfence(output);
      auto read = parse_json(body, "the output");
      if (!read.ok()) return {false, read.status().message()};
      const json parsed = std::move(*read);
      auto want = expected_structure(expected);
      const bool match = spec.require_match.value_or(!exp.empty());
      if (!match) return {true, "valid JSON"};
      if (!want) {
        // A non-structured expected (e.g. a plain string) is compared as a JSON value.
        want = parse_json(exp, "expected").value_or(json(exp));
      }
      if (parsed == *want) return {true, "valid JSON, equal to expected"};
      return {false, "valid JSON, differs from expected " + want->dump().substr(0, 200)};
    }
    case ScorerType::kJsonSchema: {
      const json& schema = spec.schema.is_null() ? expected : spec.schema;
      if (!schema.is_object() && !schema.is_boolean())
        return {false, "no schema: give the scorer a `schema`, or the example a schema as its expected answer"};
      auto read = parse_json(unfence(output), "the output");
      if (!read.ok()) return {false, read.status().message()};
      if (auto why = json_schema_violation(schema, *read)) return {false, *why};
      return {true, "valid against the schema"};
    }
    case ScorerType::kAll:
    case ScorerType::kAny: {
      const bool all = spec.type == ScorerType::kAll;
      bool result = all;
      std::string detail = all ? "all:" : "any:";
      for (size_t i = 0; i < spec.of.size(); ++i) {
        const json& e = spec.of_expected[i] ? *spec.of_expected[i] : expected;
        ScoreResult r = score(spec.of[i], e, raw_output);
        detail += std::string(i ? ";" : "") + " " + scorer_type_name(spec.of[i].type) + (r.passed ? " ok" : " failed (" + r.detail + ")");
        result = all ? (result && r.passed) : (result || r.passed);
      }
      return {result, detail};
    }
  }
  return {false, "unknown scorer"};
}

}  // namespace kiln
