#include "cli/out_file.h"

#include <fstream>

namespace kiln::cli {

Status write_out_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("--out " + path + " cannot be written");
  out << text;
  out.close();
  if (!out) return io_error("--out " + path + " could not be written completely");
  return {};
}

}  // namespace kiln::cli
