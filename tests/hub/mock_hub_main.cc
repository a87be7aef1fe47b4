// kiln_mock_hub: the tests' stand-in for the Hugging Face Hub as a process, for checking Kiln's
// cache against huggingface_hub and transformers (tools/hub_interop.py).
//   kiln_mock_hub --repo ORG/NAME=DIR [--repo ...] [--port N] [--cdn-https --cert-dir DIR]
// Prints "endpoint http://127.0.0.1:PORT" and serves until its standard input closes.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "hub/mock_hub.h"

int main(int argc, char** argv) {
  kiln::testing::MockHub::Options o;
  o.cdn_https = false;
  std::vector<std::pair<std::string, std::string>> repos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--repo") {
      const std::string v = value();
      const size_t eq = v.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "--repo wants ORG/NAME=DIR, got %s\n", v.c_str());
        return 2;
      }
      repos.push_back({v.substr(0, eq), v.substr(eq + 1)});
    } else if (a == "--port") {
      o.port = std::stoi(value());
    } else if (a == "--cdn-https") {
      o.cdn_https = true;
    } else if (a == "--cert-dir") {
      o.cert_dir = value();
    } else {
      std::fprintf(stderr, "usage: kiln_mock_hub --repo ORG/NAME=DIR [--repo ...] [--port N] [--cdn-https --cert-dir DIR]\n");
      return 2;
    }
  }
  auto hub = kiln::testing::MockHub::start(o);
  if (!hub) {
    std::fprintf(stderr, "kiln_mock_hub: cannot start (port taken, or no certificate)\n");
    return 1;
  }
  for (const auto& [id, dir] : repos) hub->add_repo(kiln::testing::MockRepo::from_dir(id, dir));
  std::printf("endpoint %s\n", hub->endpoint().c_str());
  if (!hub->ca_file().empty()) std::printf("ca_file %s\n", hub->ca_file().c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
