#include "server/request_log.h"
#include "core/json_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {

namespace fs = std::filesystem;

constexpr const char* kRotatedPrefix = "requests-";
constexpr const char* kRotatedSuffix = ".jsonl.gz";

bool is_rotated_name(const std::string& name) {
  const std::string suf = kRotatedSuffix;
  return name.rfind(kRotatedPrefix, 0) == 0 && name.size() > suf.size() + 9 &&
         name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
}

std::vector<fs::path> rotated_files(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && is_rotated_name(e.path().filename().string())) out.push_back(e.path());
  std::sort(out.begin(), out.end());  // the UTC time then the sequence number: oldest first
  return out;
}

// The sequence number of a rotated file's name ("requests-<time>-<seq>.jsonl.gz"), 0 if unreadable.
uint64_t rotated_seq(const std::string& name) {
  const size_t end = name.size() - std::strlen(kRotatedSuffix);
  const size_t dash = name.rfind('-', end);
  if (dash == std::string::npos) return 0;
  return std::strtoull(name.substr(dash + 1, end - dash - 1).c_str(), nullptr, 10);
}

std::string utc_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string errno_text() { return std::strerror(errno); }

// Compresses `src` into `dst` (gzip), through a temporary name and an fsync, so that `dst` exists
// only complete.
Status gzip_file(const std::string& src, const std::string& dst) {
  const std::string tmp = dst + ".tmp";
  std::ifstream in(src, std::ios::binary);
  if (!in) return io_error("cannot read " + src + ": " + errno_text());
  // Owner-only, like the current file: the rows hold what clients sent.
  const int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return io_error("cannot create " + tmp + ": " + errno_text());
  gzFile gz = gzdopen(out, "wb6");
  if (!gz) {
    ::close(out);
    return io_error("cannot create " + tmp + ": " + errno_text());
  }
  std::vector<char> buf(1 << 16);
  bool ok = true;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n > 0 && gzwrite(gz, buf.data(), static_cast<unsigned>(n)) != static_cast<int>(n)) ok = false;
  }
  if (gzclose(gz) != Z_OK) ok = false;
  if (ok) {
    const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  if (!ok || std::rename(tmp.c_str(), dst.c_str()) != 0) {
    std::remove(tmp.c_str());
    return io_error("cannot write " + dst + ": " + errno_text());
  }
  return {};
}

// Cuts a last line that lacks its '\n' (a write a crash interrupted), so new rows start on a line
// of their own. Returns the file's length afterwards.
Result<int64_t> cut_partial_tail(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot stat " + path + ": " + errno_text());
  int64_t end = st.st_size;
  std::vector<char> buf(1 << 16);
  int64_t keep = 0;  // bytes up to and including the last '\n'
  for (int64_t pos = end; pos > 0;) {
    const int64_t n = std::min<int64_t>(pos, static_cast<int64_t>(buf.size()));
    pos -= n;
    if (::pread(fd, buf.data(), static_cast<size_t>(n), pos) != n) return io_error("cannot read " + path + ": " + errno_text());
    const auto* hit = static_cast<const char*>(memrchr(buf.data(), '\n', static_cast<size_t>(n)));
    if (hit) {
      keep = pos + (hit - buf.data()) + 1;
      break;
    }
  }
  if (keep != end) {
    std::fprintf(stderr, "kiln: request log %s ended in a partial row (%lld bytes): cut\n", path.c_str(),
                 static_cast<long long>(end - keep));
    if (::ftruncate(fd, keep) != 0) return io_error("cannot truncate " + path + ": " + errno_text());
  }
  return keep;
}

}  // namespace

Result<std::unique_ptr<RequestLog>> RequestLog::open(const RequestLogOptions& options) {
  if (options.dir.empty()) return invalid_argument("logging.request_log_dir is empty");
  if (options.max_bytes < 0) return invalid_argument("logging.request_log_max_bytes is negative");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return io_error("cannot create the request log folder " + options.dir + ": " + ec.message());
  fs::permissions(options.dir, fs::perms::owner_all, ec);  // the rows hold what clients sent
  std::unique_ptr<RequestLog> log(new RequestLog(options));
  RequestLogOptions& o = log->opt_;
  if (o.rotate_bytes <= 0)
    o.rotate_bytes = o.max_bytes > 0 ? std::max<int64_t>(1, o.max_bytes / kRotateFraction) : int64_t{64} << 20;
  if (o.max_bytes > 0) o.rotate_bytes = std::min(o.rotate_bytes, o.max_bytes);
  if (o.queue_rows == 0) o.queue_rows = 1;
  // A rotation a crash interrupted leaves a temporary file; its rows are still in the current one.
  for (const auto& e : fs::directory_iterator(o.dir, ec))
    if (const std::string n = e.path().filename().string(); is_rotated_name(n.substr(0, n.size() >= 4 ? n.size() - 4 : 0)) &&
                                                             n.ends_with(".tmp"))
      fs::remove(e.path(), ec);
  for (const auto& f : rotated_files(o.dir))
    log->rotate_seq_ = std::max(log->rotate_seq_, rotated_seq(f.filename().string()));
  KILN_RETURN_IF_ERROR(log->open_current());
  log->writer_ = std::thread([l = log.get()] { l->run(); });
  return log;
}

RequestLog::~RequestLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (fd_ >= 0) ::close(fd_);
}

Status RequestLog::open_current() {
  const std::string path = (fs::path(opt_.dir) / kCurrentName).string();
  // Read-write: the partial-tail check reads the end of the file (O_APPEND only affects writes).
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) return io_error("cannot open the request log " + path + ": " + errno_text());
  Result<int64_t> kept = cut_partial_tail(fd_, path);
  if (!kept.ok()) return kept.status();
  current_bytes_ = *kept;
  return {};
}

bool RequestLog::append(const nlohmann::json& row) {
  std::string line = row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= opt_.queue_rows) {
      ++dropped_;
      return false;
    }
    queue_.push_back(std::move(line));
    ++queued_;
  }
  wake_.notify_one();
  return true;
}

void RequestLog::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = queued_;
  drained_.wait(lock, [&] { return done_ >= target; });
}

void RequestLog::run() {
  for (;;) {
    std::deque<std::string> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything is written
      batch.swap(queue_);
    }
    for (const auto& line : batch) write_line(line);
    if (fd_ >= 0 && ::fdatasync(fd_) != 0) ++write_errors_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ += batch.size();
    }
    drained_.notify_all();
  }
}

void RequestLog::write_line(const std::string& line) {
  if (fd_ < 0 && !open_current().ok()) {
    ++write_errors_;
    return;
  }
  // Rotating before a row that would cross the threshold keeps the current file within
  // rotate_bytes (a row larger than that gets a file of its own), which the cap relies on.
  if (current_bytes_ > 0 && current_bytes_ + static_cast<int64_t>(line.size()) > opt_.rotate_bytes) {
    if (Status st = rotate(); !st.ok()) {
      ++write_errors_;
      std::fprintf(stderr, "kiln: request log rotation failed: %s\n", st.to_string().c_str());
    }
    if (fd_ < 0) return;
  }
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Disk full or an I/O error: take the partial row back, so the file stays whole lines.
      if (off > 0 && ::ftruncate(fd_, current_bytes_) != 0) std::fprintf(stderr, "kiln: request log: %s\n", errno_text().c_str());
      if (write_errors_++ == 0) std::fprintf(stderr, "kiln: request log write failed: %s (rows are dropped)\n", errno_text().c_str());
      return;
    }
    off += static_cast<size_t>(n);
  }
  current_bytes_ += static_cast<int64_t>(line.size());
  ++written_;
  if (current_bytes_ >= opt_.rotate_bytes) {
    if (Status st = rotate(); !st.ok()) {
      ++write_errors_;
      std::fprintf(stderr, "kiln: request log rotation failed: %s\n", st.to_string().c_str());
    }
  }
}

Status RequestLog::rotate() {
  const std::string cur = (fs::path(opt_.dir) / kCurrentName).string();
  ::fdatasync(fd_);
  char seq[24];
  std::snprintf(seq, sizeof seq, "%06llu", static_cast<unsigned long long>(++rotate_seq_));
  const std::string dst = (fs::path(opt_.dir) / (std::string(kRotatedPrefix) + utc_stamp() + "-" + seq + kRotatedSuffix)).string();
  KILN_RETURN_IF_ERROR(gzip_file(cur, dst));
  // The compressed copy is complete on disk before the rows leave the current file.
  ::close(fd_);
  fd_ = -1;
  if (std::remove(cur.c_str()) != 0) return io_error("cannot remove " + cur + " after rotating it: " + errno_text());
  current_bytes_ = 0;
  KILN_RETURN_IF_ERROR(open_current());
  enforce_cap();
  return {};
}

// Rotated files may hold max_bytes - rotate_bytes: the current file, which grows to rotate_bytes
// before the next rotation, then still fits under the cap.
void RequestLog::enforce_cap() {
  if (opt_.max_bytes <= 0) return;
  std::vector<fs::path> files = rotated_files(opt_.dir);
  std::vector<int64_t> sizes;
  int64_t total = std::max(current_bytes_, opt_.rotate_bytes);
  std::error_code ec;
  for (const auto& f : files) {
    sizes.push_back(static_cast<int64_t>(fs::file_size(f, ec)));
    total += sizes.back();
  }
  for (size_t i = 0; i < files.size() && total > opt_.max_bytes; ++i) {
    fs::remove(files[i], ec);
    total -= sizes[i];
  }
}

Result<std::vector<nlohmann::json>> parse_request_log(const std::string& text, const std::string& name,
                                                      size_t* partial_tail_bytes) {
  std::vector<nlohmann::json> rows;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    ++line_no;
    auto row = parse_json(std::string_view(text).substr(pos, nl - pos), name).value_or(nlohmann::json());
    if (!row.is_object())
      return format_error(name + " line " + std::to_string(line_no) + " is not a JSON object");
    rows.push_back(std::move(row));
    pos = nl + 1;
  }
  if (partial_tail_bytes) *partial_tail_bytes = text.size() - pos;
  return rows;
}

Result<std::vector<nlohmann::json>> read_request_log(const std::string& path, size_t* partial_tail_bytes) {
  std::string text;
  const std::string suf = ".gz";
  if (path.size() > suf.size() && path.compare(path.size() - suf.size(), suf.size(), suf) == 0) {
    gzFile gz = gzopen(path.c_str(), "rb");
    if (!gz) return io_error("cannot open " + path + ": " + errno_text());
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(gz, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    int err = 0;
    const char* msg = gzerror(gz, &err);
    const std::string why = n < 0 ? std::string(msg ? msg : "gzip error") : "";
    gzclose(gz);
    if (n < 0) return format_error(path + " is not valid gzip data: " + why);
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("cannot open " + path + ": " + errno_text());
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  return parse_request_log(text, path, partial_tail_bytes);
}

std::vector<std::string> request_log_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& f : rotated_files(dir)) out.push_back(f.string());
  std::error_code ec;
  const fs::path cur = fs::path(dir) / RequestLog::kCurrentName;
  if (fs::exists(cur, ec)) out.push_back(cur.string());
  return out;
}

}  // namespace kiln
