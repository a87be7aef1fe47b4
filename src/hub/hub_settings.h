// Where the Hugging Face cache is and how the Hub is reached, read from the same environment
// variables huggingface_hub reads, so that Kiln and transformers share one cache.
#pragma once

#include <string>

#include "core/status.h"
#include "hub/proxy.h"

namespace kiln::hub {

inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

struct HubSettings {
  // HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
  // $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
  std::string cache_dir;
  std::string endpoint = kDefaultEndpoint;  // HF_ENDPOINT, without a trailing '/'
  // HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file HF_TOKEN_PATH (default $HF_HOME/token)
  // that `huggingface-cli login` writes. Sent only to the endpoint's own origin.
  std::string token;
  std::string token_source;  // "HF_TOKEN", the token file's path, or "" when there is none
  bool offline = false;      // HF_HUB_OFFLINE set to 1, ON, YES or TRUE: no network at all
  ProxyEnv proxy;            // HTTPS_PROXY, HTTP_PROXY, NO_PROXY (and their lower-case forms)

  static Result<HubSettings> from_env();
};

// The value huggingface_hub treats as true for a boolean variable (1, ON, YES, TRUE, any case).
bool env_flag_true(const char* value);

}  // namespace kiln::hub
