#include "cli/out_file.h"

#include <cstdio>
#include <fstream>

#include "backend/native_switches.h"
#include "core/build_stamp.h"

namespace kiln::cli {

Status emit_document(nlohmann::json doc, const std::string& out_path) {
  doc["build"] = build_stamp_json();
  doc["native_switches"] = native_switches_in_effect();
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
