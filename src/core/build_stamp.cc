#include "core/build_stamp.h"

namespace kiln {

std::string build_stamp_label() {
  const BuildStamp s = build_stamp();
  return "commit " + std::string(s.commit) + (s.known() && s.dirty ? ", modified" : "");
}

nlohmann::json build_stamp_json() {
  const BuildStamp s = build_stamp();
  return {{"commit", std::string(s.commit)}, {"dirty", s.dirty}};
}

}  // namespace kiln
