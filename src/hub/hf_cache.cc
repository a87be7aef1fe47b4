#include "hub/hf_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/atomic_publish.h"

namespace kiln::hub {

namespace fs = std::filesystem;

namespace {

std::string read_small(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  if (f) std::getline(f, s);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// Files under a folder as paths relative to it (snapshots hold symlinks; they are not followed
// into folders).
void walk(const fs::path& root, std::vector<fs::path>& out) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (!it->is_directory(ec)) out.push_back(it->path().lexically_relative(root));
}

}  // namespace

Result<std::string> normalize_etag(const std::string& etag) {
  std::string e = etag;
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  if (e.empty() || e.size() > 128) return invalid_argument("ETag '" + etag.substr(0, 140) + "' is empty or too long");
  for (char c : e)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return invalid_argument("ETag '" + etag.substr(0, 140) + "' holds characters a blob name cannot");
  if (e.front() == '.') return invalid_argument("ETag '" + etag + "' starts with '.'");
  return e;
}

std::string HfCache::snapshot_dir(const RepoRef& ref, const std::string& commit) const {
  return repo_dir(ref) + "/snapshots/" + commit;
}

std::string HfCache::blob_path(const RepoRef& ref, const std::string& etag) const {
  return repo_dir(ref) + "/blobs/" + etag;
}

Result<std::string> HfCache::commit_of(const RepoRef& ref) const {
  if (is_commit_hash(ref.revision)) return ref.revision;
  const fs::path p = fs::path(repo_dir(ref)) / "refs" / ref.revision;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return not_found(p.string() + ": no such ref");
  std::string commit = read_small(p);
  if (!is_commit_hash(commit)) return format_error(p.string() + ": does not hold a 40-hex commit hash");
  return commit;
}

Status HfCache::write_ref(const RepoRef& ref, const std::string& commit) const {
  if (ref.revision == commit) return {};
  const fs::path p = fs::path(repo_dir(ref)) / "refs" / ref.revision;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) return io_error("cannot create " + p.parent_path().string() + ": " + ec.message());
  return write_file_atomically(p.string(), commit);
}

std::string HfCache::no_exist_path(const RepoRef& ref, const std::string& commit, const std::string& path) const {
  return repo_dir(ref) + "/.no_exist/" + commit + "/" + path;
}

Status HfCache::mark_absent(const RepoRef& ref, const std::string& commit, const std::string& path) const {
  const fs::path p = no_exist_path(ref, commit, path);
  std::error_code ec;
  if (fs::exists(p, ec)) return {};
  fs::create_directories(p.parent_path(), ec);
  if (ec) return io_error("cannot create " + p.parent_path().string() + ": " + ec.message());
  std::ofstream f(p, std::ios::app);
  if (!f) return io_error("cannot create " + p.string());
  return {};
}

bool HfCache::known_absent(const RepoRef& ref, const std::string& commit, const std::string& path) const {
  std::error_code ec;
  return fs::is_regular_file(no_exist_path(ref, commit, path), ec);
}

Status HfCache::link(const RepoRef& ref, const std::string& commit, const std::string& path,
                     const std::string& etag) const {
  const fs::path dst = fs::path(snapshot_dir(ref, commit)) / path;
  std::error_code ec;
  fs::create_directories(dst.parent_path(), ec);
  if (ec) return io_error("cannot create " + dst.parent_path().string() + ": " + ec.message());
  // From snapshots/<commit>/<dirs...>/<file> up to the repository folder, then blobs/<etag>.
  std::string target;
  const size_t depth = static_cast<size_t>(std::count(path.begin(), path.end(), '/'));
  for (size_t i = 0; i < depth + 2; ++i) target += "../";
  target += "blobs/" + etag;
  const fs::path tmp = dst.parent_path() / (".kiln-link-" + std::to_string(::getpid()) + "-" + dst.filename().string());
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) return io_error("cannot link " + tmp.string() + ": " + ec.message());
  fs::rename(tmp, dst, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return io_error("cannot put the link " + dst.string() + " in place: " + ec.message());
  }
  return {};
}

Result<std::vector<HfCache::Repo>> HfCache::list() const {
  std::vector<Repo> repos;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return repos;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("models--", 0) != 0 || !entry.is_directory(ec)) continue;
    const std::string rest = name.substr(8);
    const size_t sep = rest.find("--");
    if (sep == std::string::npos) continue;
    Repo r;
    r.id = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    r.dir = entry.path().string();
    std::map<std::string, uint64_t> blob_bytes;
    for (const auto& b : fs::directory_iterator(entry.path() / "blobs", ec)) {
      const uint64_t n = b.is_regular_file(ec) ? b.file_size(ec) : 0;
      r.bytes += n;
      blob_bytes[b.path().filename().string()] = n;
    }
    std::map<std::string, std::vector<std::string>> refs_of;
    std::vector<fs::path> ref_files;
    walk(entry.path() / "refs", ref_files);
    for (const auto& rf : ref_files) refs_of[read_small(entry.path() / "refs" / rf)].push_back(rf.generic_string());
    for (const auto& s : fs::directory_iterator(entry.path() / "snapshots", ec)) {
      Revision rev;
      rev.commit = s.path().filename().string();
      rev.dir = s.path().string();
      rev.refs = refs_of[rev.commit];
      std::vector<fs::path> files;
      walk(s.path(), files);
      std::set<std::string> seen;
      for (const auto& f : files) {
        const fs::path link = s.path() / f;
        const std::string blob = fs::read_symlink(link, ec).filename().string();
        if (!ec && blob_bytes.count(blob) && seen.insert(blob).second) rev.bytes += blob_bytes[blob];
        else if (ec) rev.bytes += fs::file_size(link, ec);  // a plain file (older layouts, copies)
      }
      r.revisions.push_back(std::move(rev));
    }
    repos.push_back(std::move(r));
  }
  std::sort(repos.begin(), repos.end(), [](const Repo& a, const Repo& b) { return a.id < b.id; });
  return repos;
}

Result<uint64_t> HfCache::remove(const RepoRef& ref) const {
  const fs::path repo = repo_dir(ref);
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) return not_found(ref.id() + " is not in the Hugging Face cache (" + repo.string() + ")");
  KILN_ASSIGN_OR_RETURN(std::vector<Repo> all, list());
  uint64_t before = 0;
  for (const Repo& r : all)
    if (r.dir == repo.string()) before = r.bytes;
  if (!ref.revision_given) {
    fs::remove_all(repo, ec);
    if (ec) return io_error("cannot remove " + repo.string() + ": " + ec.message());
    fs::remove_all(fs::path(dir_) / ".locks" / ref.folder(), ec);
    return before;
  }
  auto commit = commit_of(ref);
  if (!commit.ok() || !fs::is_directory(snapshot_dir(ref, *commit), ec))
    return not_found(ref.label() + " is not in the Hugging Face cache (no snapshot for revision '" + ref.revision + "')");
  fs::remove_all(snapshot_dir(ref, *commit), ec);
  if (ec) return io_error("cannot remove " + snapshot_dir(ref, *commit) + ": " + ec.message());
  fs::remove_all(repo / ".no_exist" / *commit, ec);
  std::vector<fs::path> ref_files;
  walk(repo / "refs", ref_files);
  for (const auto& rf : ref_files)
    if (read_small(repo / "refs" / rf) == *commit) fs::remove(repo / "refs" / rf, ec);
  // Blobs still pointed at by another snapshot stay.
  std::set<std::string> used;
  for (const auto& s : fs::directory_iterator(repo / "snapshots", ec)) {
    std::vector<fs::path> files;
    walk(s.path(), files);
    for (const auto& f : files) used.insert(fs::read_symlink(s.path() / f, ec).filename().string());
  }
  std::vector<fs::path> stale;
  for (const auto& b : fs::directory_iterator(repo / "blobs", ec))
    if (!used.count(b.path().filename().string())) stale.push_back(b.path());
  uint64_t freed = 0;
  for (const auto& p : stale) {
    freed += fs::file_size(p, ec);
    fs::remove(p, ec);
  }
  if (fs::is_empty(repo / "snapshots", ec)) {
    fs::remove_all(repo, ec);
    fs::remove_all(fs::path(dir_) / ".locks" / ref.folder(), ec);
  }
  return freed;
}

Result<FileLock> FileLock::acquire(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open the lock " + path + ": " + std::strerror(errno));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd);
    return io_error("cannot lock " + path + ": " + std::strerror(err));
  }
  return FileLock(fd);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kiln::hub
