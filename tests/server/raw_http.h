// A raw HTTP/1.1 exchange over one TCP connection to 127.0.0.1, for tests that send what no
// well-behaved client library sends (two Content-Lengths, chunked bodies, bodies the server
// refuses before reading them) and look at exactly what comes back, connection closing included.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

struct RawResponse {
  int status = 0;  // 0: no answer
  std::multimap<std::string, std::string> headers;  // names in lower case
  std::string body;
  bool closed = false;  // the server closed the connection after the answer
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  bool ok() const { return fd_ >= 0; }

  // Sends all of `bytes`; false once the server has closed or reset the connection.
  bool send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads one response (Content-Length or chunked framing, or up to the close) within `timeout`.
  RawResponse read_response(std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
    RawResponse r;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t header_end;
    while ((header_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline)) return r;
    const std::string head = buf_.substr(0, header_end);
    buf_.erase(0, header_end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() >= 12) r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers.emplace(name, value);
    }
    if (r.status == 100) return read_response(timeout);
    if (!r.header("content-length").empty()) {
      const size_t n = std::stoul(r.header("content-length"));
      while (buf_.size() < n)
        if (!fill(deadline)) break;
      r.body = buf_.substr(0, n);
      buf_.erase(0, std::min(n, buf_.size()));
    } else if (r.header("transfer-encoding") == "chunked") {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos)
          if (!fill(deadline)) return r;
        const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
        while (buf_.size() < eol + 2 + size + 2)
          if (!fill(deadline)) return r;
        r.body += buf_.substr(eol + 2, size);
        buf_.erase(0, eol + 2 + size + 2);
        if (size == 0) break;
      }
    }
    // Closed: the server ends the connection at once (within 300 ms) after this answer.
    r.closed = buf_.empty() && !fill(std::chrono::steady_clock::now() + std::chrono::milliseconds(300), /*eof_only=*/true);
    return r;
  }

 private:
  // Reads what arrives before `deadline`; false at the close or the deadline.
  bool fill(std::chrono::steady_clock::time_point deadline, bool eof_only = false) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return eof_only;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buf_;
};

// One request on a fresh connection: request line, the given headers in order, the body as is
// (no Content-Length is added: the headers say what the framing is).
inline RawResponse raw_exchange(int port, const std::string& method, const std::string& target,
                                const std::vector<std::pair<std::string, std::string>>& headers,
                                const std::string& body = "") {
  RawConnection c(port);
  if (!c.ok()) return {};
  std::string req = method + " " + target + " HTTP/1.1\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  req += "\r\n" + body;
  c.send(req);  // a refusal may close the connection while the body is still being sent
  return c.read_response();
}

}  // namespace kiln::testing
