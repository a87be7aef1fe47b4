#include "hub/http_client.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>

namespace kiln::hub {

namespace {

const char* const kKeptHeaders[] = {"content-length", "content-range", "content-type", "etag", "location",
                                    "retry-after", "x-error-code", "x-error-message", "x-linked-etag",
                                    "x-linked-size", "x-repo-commit"};

HttpHead head_of(const httplib::Response& r, const Url& url) {
  HttpHead h;
  h.status = r.status;
  h.url = url.str();
  for (const char* name : kKeptHeaders)
    if (r.has_header(name)) h.headers[name] = r.get_header_value(name);
  return h;
}

}  // namespace

std::string HttpHead::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

bool is_redirect(int status) { return status == 301 || status == 302 || status == 303 || status == 307 || status == 308; }

HttpClient::HttpClient(std::string token_origin, std::string token, HttpLimits limits, ProxyEnv proxy)
    : token_origin_(std::move(token_origin)), token_(std::move(token)), limits_(limits), proxy_(std::move(proxy)) {}

Result<HttpExchange> HttpClient::get(const std::string& url, const Headers& headers, const HeadFn& on_head,
                                     const BodyFn& on_body, const FollowFn& follow) const {
  return request(false, url, headers, on_head, on_body, follow);
}

Result<HttpExchange> HttpClient::head(const std::string& url, const Headers& headers, const FollowFn& follow) const {
  return request(true, url, headers, nullptr, nullptr, follow);
}

Result<HttpExchange> HttpClient::request(bool is_head, const std::string& url_text, const Headers& headers,
                                         const HeadFn& on_head, const BodyFn& on_body, const FollowFn& follow) const {
  KILN_ASSIGN_OR_RETURN(Url url, parse_url(url_text));
  HttpExchange ex;
  for (int hop = 0;; ++hop) {
    KILN_ASSIGN_OR_RETURN(std::optional<ProxyAddress> proxy, proxy_.route(url));
    httplib::Client cli(url.origin());
    if (proxy) cli.set_proxy(proxy->host, proxy->port);
    cli.set_follow_location(false);
    cli.set_keep_alive(false);
    cli.set_connection_timeout(limits_.connect_timeout_s, 0);
    cli.set_read_timeout(limits_.read_timeout_s, 0);
    cli.set_decompress(false);
    if (url.scheme == "https") cli.enable_server_certificate_verification(true);
    httplib::Headers h;
    for (const auto& [k, v] : headers) h.emplace(k, v);
    h.emplace("Accept-Encoding", "identity");
    h.emplace("User-Agent", "kiln/0.1");
    // The token goes to the endpoint's origin only: a CDN or any other host a redirect names
    // never sees it (as the requests and httpx clients of huggingface_hub drop it there).
    if (!token_.empty() && url.origin() == token_origin_) h.emplace("Authorization", "Bearer " + token_);

    HttpHead answered;
    bool redirect = false, success = false;
    std::string error_body;
    httplib::Result res = is_head ? cli.Head(url.target, h) : cli.Get(
          url.target, h,
          [&](const httplib::Response& r) {
            answered = head_of(r, url);
            redirect = is_redirect(r.status);
            success = r.status >= 200 && r.status < 300;
            if (hop == 0) ex.first = answered;
            ex.last = answered;
            if (redirect || !success) return true;  // the body is read, capped, below
            if (on_head && !on_head(ex)) {
              ex.cancelled = true;
              return false;
            }
            return true;
          },
          [&](const char* data, size_t n) {
            if (redirect || !success) {
              const size_t room = limits_.max_error_body - std::min(limits_.max_error_body, error_body.size());
              error_body.append(data, std::min(room, n));
              return error_body.size() < limits_.max_error_body;
            }
            if (on_body && !on_body(data, n)) {
              ex.cancelled = true;
              return false;
            }
            return true;
          });
    if (is_head && res) answered = head_of(res.value(), url);
    if (!res) {
      if (ex.cancelled) return ex;
      const bool capped_error_body = res.error() == httplib::Error::Canceled && error_body.size() >= limits_.max_error_body;
      if (!capped_error_body)
        return io_error(url.origin() + ": " + httplib::to_string(res.error()) +
                        (proxy ? " (through the proxy " + proxy->host + ":" + std::to_string(proxy->port) + " that " +
                                     proxy->source + " names)"
                               : "") +
                        (res.error() == httplib::Error::SSLServerVerification
                             ? " (the server's certificate is not trusted: SSL_CERT_FILE names the CA bundle to trust)"
                             : ""));
    }
    if (is_head) {
      if (hop == 0) ex.first = answered;
      ex.last = answered;
      redirect = is_redirect(answered.status);
    }
    if (!redirect) {
      ex.error_body = std::move(error_body);
      return ex;
    }
    const std::string location = answered.header("location");
    KILN_ASSIGN_OR_RETURN(Url next, resolve_location(url, location));
    if (url.scheme == "https" && next.scheme == "http")
      return failed_precondition(url.str() + " redirects from https to plain http (" + next.origin() + "): refused");
    if (follow && !follow(url, next)) return ex;
    if (hop + 1 > limits_.max_redirects)
      return failed_precondition(url_text + ": more than " + std::to_string(limits_.max_redirects) + " redirects");
    url = next;
  }
}

}  // namespace kiln::hub
