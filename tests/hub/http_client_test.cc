// The Hub client's redirect policy, against two small servers on loopback ports (two origins):
// the token follows a redirect within its origin and never to another; redirects are counted;
// an https answer may not send the client to plain http.
#include <gtest/gtest.h>
#include <httplib.h>

#include <mutex>
#include <thread>

#include "hub/http_client.h"
#include "hub/mock_hub.h"
#include "test_util.h"

namespace kiln::hub {
namespace {

struct Server {
  httplib::Server s;
  int port = 0;
  std::thread t;
  std::mutex mu;
  std::vector<std::string> auth;  // the Authorization header of each request to /echo
  Server() {
    s.Get("/echo", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu);
      auth.push_back(req.get_header_value("Authorization"));
      res.set_content("ok", "text/plain");
    });
    s.Get("/loop", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/loop"); });
    port = s.bind_to_any_port("127.0.0.1");
    t = std::thread([this] { s.listen_after_bind(); });
    while (!s.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Server() {
    s.stop();
    t.join();
  }
  std::string origin() const { return "http://127.0.0.1:" + std::to_string(port); }
};

std::string fetch(const HttpClient& c, const std::string& url) {
  std::string body;
  auto ex = c.get(url, {}, nullptr, [&](const char* d, size_t n) {
    body.append(d, n);
    return true;
  });
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  return body;
}

TEST(HubHttp, TheTokenStaysWithinTheEndpointsOrigin) {
  Server hub, cdn;
  hub.s.Get("/to-cdn", [&](const httplib::Request&, httplib::Response& res) { res.set_redirect(cdn.origin() + "/echo"); });
  hub.s.Get("/to-self", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/echo"); });
  HttpClient c(hub.origin(), "hf_secret");
  EXPECT_EQ(fetch(c, hub.origin() + "/to-cdn"), "ok");
  EXPECT_EQ(fetch(c, hub.origin() + "/to-self"), "ok");
  ASSERT_EQ(cdn.auth.size(), 1u);
  EXPECT_EQ(cdn.auth[0], "");
  ASSERT_EQ(hub.auth.size(), 1u);
  EXPECT_EQ(hub.auth[0], "Bearer hf_secret");
}

TEST(HubHttp, RedirectsAreCounted) {
  Server hub;
  HttpClient c(hub.origin(), "", {.max_redirects = 3});
  auto ex = c.get(hub.origin() + "/loop", {}, nullptr, [](const char*, size_t) { return true; });
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("more than 3 redirects"), std::string::npos) << ex.status().message();
}

TEST(HubHttp, AHeadStopsWhereTheCallerSays) {
  Server hub, cdn;
  hub.s.Get("/to-cdn", [&](const httplib::Request&, httplib::Response& res) {
    res.set_header("X-Linked-Size", "42");
    res.set_redirect(cdn.origin() + "/echo");
  });
  HttpClient c(hub.origin(), "");
  auto ex = c.head(hub.origin() + "/to-cdn", {}, [](const Url& from, const Url& to) { return from.origin() == to.origin(); });
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ(ex->last.status, 302);
  EXPECT_EQ(ex->last.header("x-linked-size"), "42");
  EXPECT_EQ(ex->last.header("location"), cdn.origin() + "/echo");
  EXPECT_TRUE(cdn.auth.empty());
}

TEST(HubHttp, HttpsNeverRedirectsToPlainHttp) {
  const std::string dir = kiln::testing::temp_dir("tls");
  std::string error;
  ASSERT_TRUE(kiln::testing::write_test_certificate(dir + "/cert.pem", dir + "/key.pem", error)) << error;
  Server plain;
  httplib::SSLServer tls((dir + "/cert.pem").c_str(), (dir + "/key.pem").c_str());
  tls.Get("/down", [&](const httplib::Request&, httplib::Response& res) { res.set_redirect(plain.origin() + "/echo"); });
  tls.Get("/echo", [](const httplib::Request&, httplib::Response& res) { res.set_content("tls ok", "text/plain"); });
  const int port = tls.bind_to_any_port("127.0.0.1");
  std::thread t([&] { tls.listen_after_bind(); });
  while (!tls.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  setenv("SSL_CERT_FILE", (dir + "/cert.pem").c_str(), 1);
  const std::string origin = "https://127.0.0.1:" + std::to_string(port);
  HttpClient c(origin, "hf_secret");
  EXPECT_EQ(fetch(c, origin + "/echo"), "tls ok");  // the certificate is checked and trusted
  auto ex = c.get(origin + "/down", {}, nullptr, [](const char*, size_t) { return true; });
  unsetenv("SSL_CERT_FILE");
  tls.stop();
  t.join();
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("from https to plain http"), std::string::npos) << ex.status().message();
  EXPECT_TRUE(plain.auth.empty());
}

}  // namespace
}  // namespace kiln::hub
