// What the request-parser targets share: the Qwen3 tokenizer folder loaded once (the process stops
// with the fix when it is missing), and a body read as every JSON route reads it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <httplib.h>

#include "fuzz_target.h"
#include "server/route_support.h"
#include "tokenizer/qwen3_dir.h"

namespace kiln::fuzz {

// A T loaded by `load` from the Qwen3 tokenizer folder, or the process ends naming the fix.
template <typename T, typename Load>
const T* load_qwen3(Load load) {
  auto r = load(kiln::testing::qwen3_dir());
  if (!r.ok()) {
    std::fprintf(stderr, "the Qwen3 tokenizer is missing at %s (%s): run scripts/fetch-tokenizer\n",
                 kiln::testing::qwen3_dir().c_str(), r.status().to_string().c_str());
    std::exit(1);
  }
  return new T(std::move(*r));
}

// The input as a request body parsed by parse_body; false after the refusal is serialised into `res`
// as the route sends it.
inline bool read_body(const uint8_t* data, size_t size, Json& body, httplib::Response& res) {
  httplib::Request req;
  req.body = std::string(as_text(data, size));
  if (auto e = parse_body(req, body)) {
    send_error(res, *e);
    return false;
  }
  return true;
}

}  // namespace kiln::fuzz
