// A test's stand-in for a server Kiln calls (a reward server, a remote teacher): cpp-httplib on a
// free loopback port, its routes set by `routes` before it listens, stopped and joined on
// destruction.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <httplib.h>

namespace kiln::testing {

class LoopbackServer {
 public:
  explicit LoopbackServer(const std::function<void(httplib::Server&)>& routes) {
    routes(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~LoopbackServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kiln::testing
