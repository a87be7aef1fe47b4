// Proxies as curl and requests read them: which variable applies to which URL, which hosts
// no_proxy sends straight, what Kiln refuses (naming the variable, never echoing credentials),
// and a pull through a CONNECT proxy on loopback that counts its tunnels.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "hub/hub_fixture.h"
#include "hub/proxy.h"
#include "hub/pull.h"
#include "hub/test_proxy.h"

namespace kiln {
namespace {

using hub::ProxyEnv;

hub::Url url(const std::string& text) { return hub::parse_url(text).value(); }

TEST(HubProxy, NoProxyMatchesHostsAsCurlDoes) {
  const auto m = [](const std::string& list, const std::string& u) { return hub::no_proxy_matches(list, url(u)); };
  EXPECT_TRUE(m("*", "https://huggingface.co/x"));
  EXPECT_TRUE(m("huggingface.co", "https://huggingface.co/x"));
  EXPECT_TRUE(m("huggingface.co", "https://cdn-lfs.huggingface.co/x"));
  EXPECT_FALSE(m("huggingface.co", "https://nothuggingface.co/x"));
  EXPECT_TRUE(m(".huggingface.co", "https://huggingface.co/x"));
  EXPECT_TRUE(m("*.huggingface.co", "https://cdn-lfs.huggingface.co/x"));
  EXPECT_TRUE(m("example.org, HuggingFace.CO", "https://huggingface.co/x"));
  EXPECT_TRUE(m("example.org huggingface.co", "https://huggingface.co/x"));
  EXPECT_FALSE(m("example.org", "https://huggingface.co/x"));
  EXPECT_FALSE(m("", "https://huggingface.co/x"));
  EXPECT_TRUE(m("127.0.0.1", "http://127.0.0.1:8080/x"));
  EXPECT_FALSE(m("127.0.0.1", "http://127.0.0.10/x"));
  EXPECT_FALSE(m("0.0.1", "http://127.0.0.1/x"));  // an address is matched whole, not as a suffix
  EXPECT_TRUE(m("10.0.0.0/8", "http://10.20.30.40/x"));
  EXPECT_FALSE(m("10.0.0.0/8", "http://11.0.0.1/x"));
  EXPECT_TRUE(m("::1", "http://[::1]:99/x"));
  EXPECT_TRUE(m("[::1]", "http://[::1]:99/x"));
  EXPECT_TRUE(m("fd00::/8", "http://[fd12::5]/x"));
  EXPECT_TRUE(m("localhost:8080", "http://localhost:8080/x"));
  EXPECT_FALSE(m("localhost:8080", "http://localhost:9090/x"));
  EXPECT_TRUE(m("huggingface.co:443", "https://huggingface.co/x"));  // the scheme's default port
}

TEST(HubProxy, EachSchemeUsesItsVariableAndNoProxyWins) {
  ProxyEnv p;
  p.https = "http://tls-proxy:3128";
  p.http = "plain-proxy";  // no scheme: http; no port: 1080, as curl
  p.https_var = "https_proxy";
  auto tls = p.route(url("https://huggingface.co/x")).value();
  ASSERT_TRUE(tls.has_value());
  EXPECT_EQ(tls->host, "tls-proxy");
  EXPECT_EQ(tls->port, 3128);
  EXPECT_EQ(tls->source, "https_proxy");
  auto plain = p.route(url("http://mirror.local/x")).value();
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->host, "plain-proxy");
  EXPECT_EQ(plain->port, 1080);
  p.no_proxy = "mirror.local";
  EXPECT_FALSE(p.route(url("http://mirror.local/x")).value().has_value());
  EXPECT_TRUE(p.route(url("https://huggingface.co/x")).value().has_value());
  EXPECT_FALSE(ProxyEnv{}.route(url("https://huggingface.co/x")).value().has_value());
}

TEST(HubProxy, TheLowerCaseVariableComesFirst) {
  for (const char* v : {"https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"}) unsetenv(v);
  setenv("HTTPS_PROXY", "http://upper:1", 1);
  setenv("https_proxy", "http://lower:2", 1);
  setenv("HTTP_PROXY", "http://plain-upper:3", 1);
  setenv("NO_PROXY", "example.org", 1);
  const ProxyEnv p = ProxyEnv::from_env();
  for (const char* v : {"https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"}) unsetenv(v);
  EXPECT_EQ(p.https, "http://lower:2");
  EXPECT_EQ(p.https_var, "https_proxy");
  EXPECT_EQ(p.http, "http://plain-upper:3");
  EXPECT_EQ(p.http_var, "HTTP_PROXY");
  EXPECT_EQ(p.no_proxy, "example.org");
}

TEST(HubProxy, UnusableProxiesAreRefusedNamingTheVariableNotTheSecret) {
  ProxyEnv p;
  p.https_var = "HTTPS_PROXY";
  p.https = "http://alice:s3cret@proxy:3128";
  auto creds = p.route(url("https://huggingface.co/x"));
  ASSERT_FALSE(creds.ok());
  EXPECT_NE(creds.status().message().find("HTTPS_PROXY holds credentials"), std::string::npos) << creds.status().message();
  EXPECT_EQ(creds.status().message().find("s3cret"), std::string::npos) << creds.status().message();
  EXPECT_EQ(creds.status().message().find("alice"), std::string::npos) << creds.status().message();
  p.https = "socks5://proxy:1080";
  auto socks = p.route(url("https://huggingface.co/x"));
  ASSERT_FALSE(socks.ok());
  EXPECT_NE(socks.status().message().find("socks5:// proxy is not supported"), std::string::npos) << socks.status().message();
  p.https = "https://proxy:443";
  EXPECT_FALSE(p.route(url("https://huggingface.co/x")).ok());
  p.https = "http://proxy:99999";
  auto port = p.route(url("https://huggingface.co/x"));
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("HTTPS_PROXY"), std::string::npos) << port.status().message();
  // A host no_proxy covers never reads the proxy variable.
  p.no_proxy = "huggingface.co";
  EXPECT_TRUE(p.route(url("https://huggingface.co/x")).ok());
}

TEST(HubProxy, APullGoesThroughTheProxyUnlessNoProxyNamesTheHost) {
  testing::HubEnv env;  // the Hub over http, its CDN over https: both variables are used
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  auto proxy = testing::TestProxy::start();
  ASSERT_NE(proxy, nullptr);
  env.settings.proxy.http = proxy->url();
  env.settings.proxy.https = proxy->url();
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(Checkpoint::open(r->snapshot_dir).ok());
  int hub_requests = 0, cdn_requests = 0;
  for (const auto& q : env.hub->requests()) (q.server == "hub" ? hub_requests : cdn_requests)++;
  EXPECT_EQ(cdn_requests, 2);
  EXPECT_EQ(proxy->tunnels(), cdn_requests);   // each TLS transfer to the CDN through a CONNECT tunnel
  EXPECT_EQ(proxy->relayed(), hub_requests);  // each plain-HTTP request to the Hub relayed
  for (const std::string& t : proxy->targets())
    EXPECT_TRUE(t.rfind("CONNECT 127.0.0.1:", 0) == 0 || t.rfind("GET " + env.hub->endpoint() + "/", 0) == 0 ||
                t.rfind("HEAD " + env.hub->endpoint() + "/", 0) == 0)
        << t;

  // NO_PROXY=127.0.0.1: a fresh cache fills without the proxy.
  const int before = static_cast<int>(proxy->targets().size());
  env.settings.cache_dir = testing::temp_dir("hf-cache-direct");
  env.settings.proxy.no_proxy = "127.0.0.1";
  auto direct = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  EXPECT_EQ(static_cast<int>(proxy->targets().size()), before);
}

}  // namespace
}  // namespace kiln
