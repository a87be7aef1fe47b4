// RequestLog: the durable request log (logging.request_log): one JSON line per inference request,
// appended by a background writer so that a request never waits on the disk, size-rotated into
// gzip files and capped in total size. Also the reader that takes what a crash left behind.
//
// Files, all in one folder (mode 0700; the files 0600: rows hold what clients sent):
//   requests.jsonl                           the current file, appended to
//   requests-<YYYYMMDDTHHMMSSZ>-<seq>.jsonl.gz  rotated files (gzip, zlib), oldest first by name
//
// Durability: each row is one write() of the whole line ("...}\n") on an O_APPEND descriptor, so
// a crash leaves every completed row intact and at most one partial line at the end, which the
// reader ignores (and the writer cuts off when it reopens the file). After each batch it drains
// the writer calls fdatasync once (group commit): a row is on disk at most one batch after it was
// queued, and a burst costs one sync, not one per row.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace kiln {

struct RequestLogOptions {
  std::string dir;
  // Most bytes on disk, rotated files plus the current one; 0: no cap. The oldest rotated files
  // are deleted first; the current file is never deleted.
  int64_t max_bytes = int64_t{1} << 30;
  // The current file is rotated before a row would take it past this many bytes, and once it
  // reaches them (a row larger than this gets a file of its own); 0: max_bytes / kRotateFraction
  // (at least 1 byte; with no cap: 64 MiB). At most max_bytes. Rotated files keep to
  // max_bytes - rotate_bytes, so the total stays under the cap while the current file grows.
  int64_t rotate_bytes = 0;
  size_t queue_rows = 4096;  // rows waiting for the writer; more are dropped and counted
};

class RequestLog {
 public:
  static constexpr int64_t kRotateFraction = 8;  // so the cap holds ~8 rotated files of raw JSONL
  static constexpr const char* kCurrentName = "requests.jsonl";

  // Creates `dir` if needed, cuts a partial last line of an existing current file, starts the writer.
  static Result<std::unique_ptr<RequestLog>> open(const RequestLogOptions& options);
  ~RequestLog();  // writes every queued row, then stops the writer

  // Queues one row (serialised at once); false when the queue is full and the row was dropped.
  bool append(const nlohmann::json& row);
  // Blocks until every row queued so far is written, synced and rotated as due (tests, shutdown).
  void flush();

  uint64_t rows_written() const { return written_.load(); }
  uint64_t rows_dropped() const { return dropped_.load(); }
  uint64_t write_errors() const { return write_errors_.load(); }
  const std::string& dir() const { return opt_.dir; }
  int64_t rotate_bytes() const { return opt_.rotate_bytes; }

 private:
  explicit RequestLog(RequestLogOptions options) : opt_(std::move(options)) {}
  Status open_current();
  void run();
  void write_line(const std::string& line);
  Status rotate();
  void enforce_cap();

  RequestLogOptions opt_;
  int fd_ = -1;
  int64_t current_bytes_ = 0;
  uint64_t rotate_seq_ = 0;
  std::mutex mu_;
  std::condition_variable wake_, drained_;
  std::deque<std::string> queue_;
  uint64_t queued_ = 0, done_ = 0;  // rows accepted / rows the writer has finished (under mu_)
  bool stop_ = false;
  std::atomic<uint64_t> written_{0}, dropped_{0}, write_errors_{0};
  std::thread writer_;
};

// Every complete row of a request-log file (.jsonl, or .jsonl.gz decompressed): lines that end in
// '\n' and parse as JSON objects. A last line without '\n' (a write cut by a crash) is skipped
// and its length reported in `partial_tail_bytes`; a complete line that does not parse is an error
// naming the file and line.
Result<std::vector<nlohmann::json>> read_request_log(const std::string& path, size_t* partial_tail_bytes = nullptr);
// The same over bytes already in memory (`name` for messages).
Result<std::vector<nlohmann::json>> parse_request_log(const std::string& text, const std::string& name,
                                                      size_t* partial_tail_bytes = nullptr);
// The log's files, oldest first: rotated ones by name, then the current one if it exists.
std::vector<std::string> request_log_files(const std::string& dir);

}  // namespace kiln
