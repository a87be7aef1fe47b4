// HTTP(S) for the Hub client, on cpp-httplib with OpenSSL: one request and its redirects, each
// Location resolved and counted, the bearer token sent only to the endpoint's own origin, never
// from https down to http, bodies streamed to the caller, every size the remote controls capped;
// each hop through the proxy the environment names for its URL (hub/proxy.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "hub/proxy.h"
#include "hub/url.h"

namespace kiln::hub {

struct HttpLimits {
  int max_redirects = 5;
  size_t max_error_body = 64 * 1024;  // bytes of a non-2xx body kept for the message
  int connect_timeout_s = 15;
  int read_timeout_s = 60;
};

// One response's status and the headers the client reads (lower-case names).
struct HttpHead {
  int status = 0;
  std::string url;  // the URL that answered
  std::map<std::string, std::string> headers;
  std::string header(const std::string& lower_name) const;
};

struct HttpExchange {
  HttpHead first;            // the endpoint's own answer (a redirect's X-Linked-* headers live here)
  HttpHead last;             // the answer whose body was read
  std::string error_body;    // a non-2xx body, capped
  bool cancelled = false;    // a callback said stop
};

// A transport failure (no connection, reset, timeout, TLS refusal) is an kIoError Status;
// any HTTP answer is an HttpExchange for the caller to judge.
class HttpClient {
 public:
  HttpClient(std::string token_origin, std::string token, HttpLimits limits = {}, ProxyEnv proxy = {});

  using Headers = std::vector<std::pair<std::string, std::string>>;
  // `follow` decides, per redirect, whether to go on (HEAD uses it to stop at the CDN).
  using FollowFn = std::function<bool(const Url& from, const Url& to)>;
  using HeadFn = std::function<bool(const HttpExchange&)>;      // false: do not read the body
  using BodyFn = std::function<bool(const char*, size_t)>;      // false: stop reading

  Result<HttpExchange> get(const std::string& url, const Headers& headers, const HeadFn& on_head,
                           const BodyFn& on_body, const FollowFn& follow = nullptr) const;
  Result<HttpExchange> head(const std::string& url, const Headers& headers, const FollowFn& follow) const;

 private:
  Result<HttpExchange> request(bool is_head, const std::string& url, const Headers& headers, const HeadFn& on_head,
                               const BodyFn& on_body, const FollowFn& follow) const;
  std::string token_origin_, token_;
  HttpLimits limits_;
  ProxyEnv proxy_;
};

bool is_redirect(int status);

}  // namespace kiln::hub
