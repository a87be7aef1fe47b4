#include "hub/test_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace kiln::testing {

namespace {

int connect_loopback(const std::string& host, int port) {
  if (host != "127.0.0.1" && host != "localhost") return -1;  // never anywhere else
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

bool send_all(int fd, const std::string& s) {
  for (size_t at = 0; at < s.size();) {
    const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// "host:port" into its parts; false when malformed.
bool split_host_port(const std::string& hp, std::string& host, int& port) {
  const size_t colon = hp.rfind(':');
  if (colon == std::string::npos) return false;
  host = hp.substr(0, colon);
  port = std::atoi(hp.c_str() + colon + 1);
  return port > 0 && port < 65536;
}

}  // namespace

struct TestProxy::Impl {
  int listen_fd = -1, port = 0;
  std::atomic<bool> stop{false};
  std::thread acceptor;
  std::mutex mu;
  std::vector<std::thread> conns;
  std::vector<std::string> targets;
  int tunnels = 0, relayed = 0;

  // Copies bytes both ways until either side closes (or the proxy stops).
  void relay(int a, int b) {
    char buf[64 * 1024];
    while (!stop) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      const int r = ::poll(p, 2, 100);
      if (r < 0) return;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
        if (n <= 0 || !send_all(p[1 - i].fd, std::string(buf, static_cast<size_t>(n)))) return;
      }
    }
  }

  void serve(int client) {
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 64 * 1024 && !stop) {
      pollfd p{client, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(client, buf, sizeof buf, 0);
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    const size_t eol = head.find("\r\n");
    const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
    if (eol == std::string::npos || sp1 == std::string::npos || sp2 == std::string::npos || sp2 > eol) {
      send_all(client, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      ::close(client);
      return;
    }
    const std::string method = head.substr(0, sp1), target = head.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string host, path = "/";
    int port = 0;
    bool ok = false;
    if (method == "CONNECT") {
      ok = split_host_port(target, host, port);
    } else if (target.rfind("http://", 0) == 0) {
      const std::string rest = target.substr(7);
      const size_t slash = rest.find('/');
      if (slash != std::string::npos) path = rest.substr(slash);
      ok = split_host_port(rest.substr(0, slash), host, port);
    }
    const int upstream = ok ? connect_loopback(host, port) : -1;
    {
      std::lock_guard<std::mutex> lock(mu);
      targets.push_back(method + " " + target);
      if (upstream >= 0) ++(method == "CONNECT" ? tunnels : relayed);
    }
    if (upstream < 0) {
      send_all(client, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    } else if (method == "CONNECT") {
      if (send_all(client, "HTTP/1.1 200 Connection established\r\n\r\n")) relay(client, upstream);
    } else {
      // The request in origin form, then whatever followed its head.
      const std::string rewritten = method + " " + path + head.substr(sp2);
      if (send_all(upstream, rewritten)) relay(client, upstream);
    }
    if (upstream >= 0) ::close(upstream);
    ::close(client);
  }

  void accept_loop() {
    while (!stop) {
      pollfd p{listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard<std::mutex> lock(mu);
      conns.emplace_back([this, c] { serve(c); });
    }
  }
};

TestProxy::TestProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<TestProxy> TestProxy::start() {
  auto impl = std::make_unique<Impl>();
  impl->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (impl->listen_fd < 0 || ::bind(impl->listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(impl->listen_fd, 64) != 0 || ::getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (impl->listen_fd >= 0) ::close(impl->listen_fd);
    return nullptr;
  }
  impl->port = ntohs(a.sin_port);
  Impl* p = impl.get();
  impl->acceptor = std::thread([p] { p->accept_loop(); });
  return std::unique_ptr<TestProxy>(new TestProxy(std::move(impl)));
}

TestProxy::~TestProxy() {
  impl_->stop = true;
  impl_->acceptor.join();
  for (auto& t : impl_->conns) t.join();
  ::close(impl_->listen_fd);
}

std::string TestProxy::url() const { return "http://127.0.0.1:" + std::to_string(impl_->port); }

int TestProxy::tunnels() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->tunnels;
}

int TestProxy::relayed() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->relayed;
}

std::vector<std::string> TestProxy::targets() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->targets;
}

}  // namespace kiln::testing
