#include "cli/bench_peer.h"

#include <fstream>

namespace kiln::cli {

Result<nlohmann::json> read_peer_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("--peer-json: cannot open " + path);
  nlohmann::json peer = nlohmann::json::parse(in, nullptr, false);
  if (peer.is_discarded()) return format_error("--peer-json: " + path + " is not JSON");
  return peer;
}

}  // namespace kiln::cli
