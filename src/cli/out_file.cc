#include "cli/out_file.h"

#include <cstdio>
#include <fstream>

namespace kiln::cli {

Status emit_document(const nlohmann::json& doc, const std::string& out_path) {
  const std::string text = doc.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (out_path.empty()) return {};
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("--out " + out_path + " cannot be written");
  out << text;
  out.close();
  if (!out) return io_error("--out " + out_path + " could not be written completely");
  return {};
}

}  // namespace kiln::cli
