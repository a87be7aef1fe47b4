#include "hub/repo_ref.h"

#include <cctype>

namespace kiln::hub {

namespace {

constexpr size_t kMaxPartChars = 96;      // the Hub's limit on a namespace or a name
constexpr size_t kMaxRevisionChars = 255;

bool part_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; }

Status check_part(const std::string& text, const std::string& part, const char* what) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("model name '" + text + "': the " + what + " '" + part + "' " + why +
                            " (a Hub name is ORG/NAME[@REVISION] of letters, digits, '-', '_' and '.')");
  };
  if (part.empty()) return bad("is empty");
  if (part.size() > kMaxPartChars) return bad("is longer than 96 characters");
  for (char c : part)
    if (!part_char(c)) return bad("holds the character '" + std::string(1, c) + "'");
  if (part.find("--") != std::string::npos || part.find("..") != std::string::npos) return bad("holds '--' or '..'");
  if (!std::isalnum(static_cast<unsigned char>(part.front())) || !std::isalnum(static_cast<unsigned char>(part.back())))
    return bad("must start and end with a letter or digit");
  return {};
}

Status check_revision(const std::string& text, const std::string& rev) {
  auto bad = [&](const std::string& why) { return invalid_argument("model name '" + text + "': revision '" + rev + "' " + why); };
  if (rev.empty()) return bad("is empty");
  if (rev.size() > kMaxRevisionChars) return bad("is longer than 255 characters");
  for (char c : rev)
    if (!part_char(c) && c != '/') return bad("holds the character '" + std::string(1, c) + "'");
  if (rev.front() == '/' || rev.back() == '/' || rev.find("//") != std::string::npos) return bad("has an empty path part");
  size_t start = 0;
  while (start <= rev.size()) {
    size_t end = rev.find('/', start);
    if (end == std::string::npos) end = rev.size();
    const std::string piece = rev.substr(start, end - start);
    if (piece == "." || piece == ".." || piece.front() == '.') return bad("has a path part starting with '.'");
    start = end + 1;
  }
  return {};
}

}  // namespace

std::string RepoRef::label() const { return revision_given ? id() + "@" + revision : id(); }

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

Result<RepoRef> parse_repo_ref(const std::string& text) {
  RepoRef r;
  std::string id = text;
  if (size_t at = text.find('@'); at != std::string::npos) {
    id = text.substr(0, at);
    r.revision = text.substr(at + 1);
    r.revision_given = true;
    KILN_RETURN_IF_ERROR(check_revision(text, r.revision));
  }
  const size_t slash = id.find('/');
  if (slash == std::string::npos || id.find('/', slash + 1) != std::string::npos)
    return invalid_argument("model name '" + text + "': expected ORG/NAME[@REVISION] (exactly one '/' before any '@')");
  r.org = id.substr(0, slash);
  r.name = id.substr(slash + 1);
  KILN_RETURN_IF_ERROR(check_part(text, r.org, "organisation"));
  KILN_RETURN_IF_ERROR(check_part(text, r.name, "name"));
  return r;
}

}  // namespace kiln::hub
