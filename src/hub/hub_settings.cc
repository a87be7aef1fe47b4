#include "hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kiln::hub {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string expand_home(const std::string& path) {
  if (path.empty() || path[0] != '~') return path;
  const std::string home = env("HOME");
  return home.empty() ? path : home + path.substr(1);
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

}  // namespace

bool env_flag_true(const char* value) {
  if (value == nullptr) return false;
  std::string v = trim(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

Result<HubSettings> HubSettings::from_env() {
  HubSettings s;
  std::string hf_home = env("HF_HOME");
  if (hf_home.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME");
    const std::string home = env("HOME");
    if (xdg.empty() && home.empty() && env("HF_HUB_CACHE").empty() && env("HUGGINGFACE_HUB_CACHE").empty())
      return failed_precondition("none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME is set: cannot place the Hugging Face cache");
    hf_home = (xdg.empty() ? home + "/.cache" : xdg) + "/huggingface";
  }
  hf_home = expand_home(hf_home);
  s.cache_dir = expand_home(env("HF_HUB_CACHE"));
  if (s.cache_dir.empty()) s.cache_dir = expand_home(env("HUGGINGFACE_HUB_CACHE"));
  if (s.cache_dir.empty()) s.cache_dir = hf_home + "/hub";

  if (std::string e = trim(env("HF_ENDPOINT")); !e.empty()) {
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0)
      return invalid_argument("HF_ENDPOINT '" + e + "': expected an http:// or https:// URL");
    s.endpoint = e;
  }
  s.offline = env_flag_true(std::getenv("HF_HUB_OFFLINE"));
  s.proxy = ProxyEnv::from_env();

  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
    if (std::string t = trim(env(name)); !t.empty()) {
      s.token = t;
      s.token_source = name;
      return s;
    }
  std::string token_path = expand_home(env("HF_TOKEN_PATH"));
  if (token_path.empty()) token_path = hf_home + "/token";
  if (std::ifstream f(token_path); f) {
    std::stringstream ss;
    ss << f.rdbuf();
    if (std::string t = trim(ss.str()); !t.empty() && t.size() <= 4096 && t.find_first_of("\r\n") == std::string::npos) {
      s.token = t;
      s.token_source = token_path;
    }
  }
  return s;
}

}  // namespace kiln::hub
