// A forward HTTP proxy on loopback for the tests: CONNECT opens a tunnel (how HTTPS goes through
// a proxy), a request in absolute form ("GET http://host:port/path") is relayed (plain HTTP).
// It counts both, and only ever connects to loopback addresses.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kiln::testing {

class TestProxy {
 public:
  static std::unique_ptr<TestProxy> start();  // null when no port could be bound
  ~TestProxy();

  std::string url() const;                // http://127.0.0.1:PORT
  int tunnels() const;                    // CONNECT requests answered 200
  int relayed() const;                    // absolute-form requests relayed
  std::vector<std::string> targets() const;  // "CONNECT 127.0.0.1:443", "GET http://127.0.0.1:80/x", in order

  struct Impl;

 private:
  explicit TestProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::testing
