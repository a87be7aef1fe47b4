#include "server/tar_gz.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

namespace kiln {

namespace {

constexpr size_t kPiece = 1 << 16;  // bytes read or written at a time
// An adapter is two or three files; a cap keeps an archive of countless empty files from costing
// a file each.
constexpr size_t kMaxFiles = 64;

std::string errno_text() { return std::strerror(errno); }

// libarchive's last error; it has none to give for some failures (a truncated gzip stream).
std::string why(archive* a) {
  const char* text = archive_error_string(a);
  return text ? text : "libarchive gave no reason";
}

struct ReadArchive {
  archive* a = archive_read_new();
  ~ReadArchive() { archive_read_free(a); }
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool plain_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\\') == std::string::npos;
}

std::vector<std::string> split_path(const std::string& p) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t slash = std::min(p.find('/', start), p.size());
    if (slash > start) parts.push_back(p.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

// Where entry `raw` lands: its plain file name (or "" for the one folder entries may sit in),
// checked against the folder seen so far.
Result<std::string> member_name(const std::string& raw, bool is_dir, std::string& folder, bool& first) {
  if (raw.empty()) return invalid_argument("an archive entry has no name");
  if (raw[0] == '/') return invalid_argument("archive entry '" + raw + "': absolute paths are refused");
  std::vector<std::string> parts = split_path(raw);
  while (!parts.empty() && parts.front() == ".") parts.erase(parts.begin());
  for (const std::string& p : parts)
    if (p == "..") return invalid_argument("archive entry '" + raw + "': '..' is refused");
  if (parts.empty()) return std::string();  // "./"
  if (parts.size() > 2 || (is_dir && parts.size() > 1))
    return invalid_argument("archive entry '" + raw + "': an adapter archive holds one flat folder, no nested ones");
  const std::string dir = is_dir ? parts[0] : (parts.size() == 2 ? parts[0] : "");
  if (!first && dir != folder)
    return invalid_argument("archive entry '" + raw + "': entries lie in more than one folder");
  folder = dir;
  first = false;
  if (is_dir) return std::string();
  if (!plain_name(parts.back()) || (!dir.empty() && !plain_name(dir)))
    return invalid_argument("archive entry '" + raw + "': not a plain file name");
  return parts.back();
}

la_ssize_t append_output(archive*, void* client, const void* buf, size_t n) {
  static_cast<std::string*>(*static_cast<std::string**>(client))->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

}  // namespace

Result<size_t> extract_tar_gz(const std::string& archive_path, const std::string& dir, uint64_t max_bytes) {
  ReadArchive r;
  // Only gzip and tar: no other compressor or format is ever parsed.
  archive_read_support_filter_gzip(r.a);
  archive_read_support_format_tar(r.a);
  if (archive_read_open_filename(r.a, archive_path.c_str(), kPiece) != ARCHIVE_OK)
    return format_error("not tar.gz data: " + why(r.a));
  std::string folder;
  bool first = true;
  std::set<std::string> seen;
  uint64_t total = 0;
  const std::string over = "the archive's files total more than " + std::to_string(max_bytes) + " bytes";
  std::vector<char> buf(kPiece);
  for (;;) {
    archive_entry* e = nullptr;
    const int rc = archive_read_next_header(r.a, &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
      return format_error("unreadable tar.gz data: " + why(r.a));
    const char* path = archive_entry_pathname(e);
    const std::string raw = path ? path : "";
    const mode_t type = archive_entry_filetype(e);
    if (archive_entry_hardlink(e) || archive_entry_symlink(e) || (type != AE_IFREG && type != AE_IFDIR))
      return invalid_argument("archive entry '" + raw +
                              "': only regular files may be in an adapter archive (no links or devices)");
    KILN_ASSIGN_OR_RETURN(std::string name, member_name(raw, type == AE_IFDIR, folder, first));
    if (name.empty()) continue;
    if (!seen.insert(name).second) return invalid_argument("archive entry '" + raw + "' appears twice");
    if (seen.size() > kMaxFiles)
      return invalid_argument("the archive holds more than " + std::to_string(kMaxFiles) + " files");
    if (archive_entry_size_is_set(e) && static_cast<uint64_t>(archive_entry_size(e)) > max_bytes - total)
      return resource_exhausted(over);
    const std::string out_path = dir + "/" + name;
    Fd out{::open(out_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
    if (out.fd < 0) return io_error("cannot create " + out_path + ": " + errno_text());
    for (;;) {
      const la_ssize_t n = archive_read_data(r.a, buf.data(), buf.size());
      if (n == 0) break;
      if (n < 0)
        return format_error("archive entry '" + raw + "' cannot be read: " + why(r.a));
      total += static_cast<uint64_t>(n);
      if (total > max_bytes) return resource_exhausted(over);
      for (la_ssize_t done = 0; done < n;) {
        const ssize_t w = ::write(out.fd, buf.data() + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return io_error("cannot write " + out_path + ": " + errno_text());
        done += w;
      }
    }
    if (::close(out.fd) != 0) return io_error("cannot write " + out_path + ": " + errno_text());
    out.fd = -1;
  }
  if (seen.empty()) return invalid_argument("the archive holds no files");
  return seen.size();
}

Result<std::unique_ptr<TarGzStream>> TarGzStream::open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<TarGzStream> s(new TarGzStream());
  s->dir_ = dir;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink() || !e.is_regular_file()) return unsupported(dir + ": '" + name + "' is not a regular file");
    names.push_back(name);
  }
  if (ec) return io_error(dir + ": " + ec.message());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    File f{name, ::open((dir + "/" + name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), 0};
    if (f.fd < 0) return io_error("cannot open " + dir + "/" + name + ": " + errno_text());
    s->files_.push_back(f);
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) return io_error("cannot stat " + dir + "/" + name + ": " + errno_text());
    s->files_.back().size = static_cast<uint64_t>(st.st_size);
  }
  s->a_ = archive_write_new();
  archive_write_set_format_ustar(s->a_);
  archive_write_add_filter_gzip(s->a_);
  archive_write_set_filter_option(s->a_, "gzip", "timestamp", nullptr);  // the same folder, the same bytes
  archive_write_set_bytes_in_last_block(s->a_, 1);  // no padding after the compressed stream
  if (archive_write_open2(s->a_, &s->out_, nullptr, append_output, nullptr, nullptr) != ARCHIVE_OK)
    return s->archive_error("cannot start the archive of " + dir);
  return s;
}

TarGzStream::~TarGzStream() {
  for (const File& f : files_) ::close(f.fd);
  if (a_) archive_write_free(a_);  // closes it first
}

Status TarGzStream::archive_error(const std::string& what) const {
  return io_error(what + ": " + why(a_));
}

Result<bool> TarGzStream::next(std::string& out) {
  if (closed_) return false;
  out_ = &out;
  if (index_ == files_.size()) {
    closed_ = true;
    if (archive_write_close(a_) != ARCHIVE_OK) return archive_error("cannot finish the archive of " + dir_);
    return false;
  }
  const File& f = files_[index_];
  if (!in_entry_) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, f.name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(f.size));
    archive_entry_set_mtime(e, 0, 0);
    const int rc = archive_write_header(a_, e);
    archive_entry_free(e);
    if (rc != ARCHIVE_OK) return archive_error("cannot archive " + dir_ + "/" + f.name);
    in_entry_ = true;
    left_ = f.size;
  }
  char buf[kPiece];
  const size_t want = static_cast<size_t>(std::min<uint64_t>(left_, sizeof buf));
  ssize_t n = 0;
  while (want > 0 && (n = ::read(f.fd, buf, want)) < 0 && errno == EINTR) {
  }
  if (n < 0) return io_error("cannot read " + dir_ + "/" + f.name + ": " + errno_text());
  if (want > 0 && n == 0) return io_error(dir_ + "/" + f.name + " shrank while it was archived");
  if (n > 0 && archive_write_data(a_, buf, static_cast<size_t>(n)) != n)
    return archive_error("cannot archive " + dir_ + "/" + f.name);
  left_ -= static_cast<uint64_t>(n);
  if (left_ == 0) {
    in_entry_ = false;
    ++index_;
  }
  return true;
}

}  // namespace kiln
