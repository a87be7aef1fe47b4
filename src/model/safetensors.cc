#include "model/safetensors.h"
#include "core/json_text.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kiln {

using nlohmann::json;

namespace {

std::optional<DType> safetensors_dtype(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  if (s == "U8") return DType::kU8;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  return std::nullopt;
}

const char* safetensors_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  return "?";
}

}  // namespace

Status Checkpoint::add_file(const std::string& path, const Keep& keep) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  const uint64_t size = file->bytes();
  if (size < 8) return format_error(path + ": truncated file (" + std::to_string(size) + " bytes, no header)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->bytes_ptr(), 8);  // little-endian on every supported host
  if (header_len > size - 8)
    return format_error(path + ": truncated file: header claims " + std::to_string(header_len) + " bytes, file has " +
                        std::to_string(size - 8) + " after the length");
  auto parsed = parse_json(std::string_view(reinterpret_cast<const char*>(file->bytes_ptr()) + 8, header_len), path + ": the header");
  if (!parsed.ok() || !parsed->is_object())
    return format_error(path + ": corrupt header JSON" + (parsed.ok() ? std::string() : " (" + parsed.status().message() + ")"));
  const json header = std::move(*parsed);
  const uint64_t data_start = 8 + header_len, data_size = size - data_start;
  total_bytes_ += size;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    if (keep && !keep(name)) {
      ++skipped_;
      continue;
    }
    const json& e = *it;
    auto bad = [&](const std::string& why) { return format_error(path + ": tensor '" + name + "': " + why); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return bad("header entry needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) return bad("dtype is not a string");
    auto dtype = safetensors_dtype(e["dtype"].get<std::string>());
    if (!dtype) return bad("unknown dtype '" + e["dtype"].get<std::string>() + "'");
    const json& sh = e["shape"];
    const json& off = e["data_offsets"];
    if (!sh.is_array() || sh.size() > kMaxRank) return bad("shape must be an array of at most 6 dims");
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return bad("data_offsets must be two non-negative integers");
    int64_t dims[kMaxRank];
    int rank = 0;
    // The byte count is multiplied out with overflow checks: a header's dims may multiply past
    // 2^64 (or, read as int64, to a negative count) while the tensor claims a few bytes.
    uint64_t need = dtype_size(*dtype);
    bool overflow = false;
    for (const auto& d : sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return bad("shape entries must be non-negative integers below 2^63");
      dims[rank++] = d.get<int64_t>();
      overflow |= __builtin_mul_overflow(need, d.get<uint64_t>(), &need);
    }
    Shape shape = Shape::of(dims, rank);
    if (overflow) return bad("shape " + shape.to_string() + " holds more than 2^64 bytes");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (end < begin || end - begin != need)
      return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") do not hold " +
                 shape.to_string() + " " + std::string(dtype_name(*dtype)) + " (" + std::to_string(need) + " bytes)");
    if (end > data_size)
      return format_error(path + ": truncated file: tensor '" + name + "' needs data up to byte " +
                          std::to_string(end) + ", the file holds " + std::to_string(data_size));
    if (tensors_.count(name))
      return format_error(path + ": tensor '" + name + "' also appears in " + tensors_[name].file);
    tensors_[name] = TensorEntry{Tensor(file, *dtype, shape, data_start + begin), path};
  }
  return {};
}

Result<Checkpoint> Checkpoint::open_file(const std::string& path) {
  Checkpoint c;
  KILN_RETURN_IF_ERROR(c.add_file(path));
  return c;
}

Result<Checkpoint> Checkpoint::open(const std::string& dir, const Keep& keep) {
  Checkpoint c;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::ifstream index(index_path);
  if (!index) {
    std::ifstream single(dir + "/model.safetensors");
    if (!single) return not_found(dir + ": neither model.safetensors nor model.safetensors.index.json exists");
    KILN_RETURN_IF_ERROR(c.add_file(dir + "/model.safetensors", keep));
    return c;
  }
  std::stringstream ss;
  ss << index.rdbuf();
  json j = parse_json(ss.str(), index_path).value_or(json());
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return format_error(index_path + ": not a safetensors index (no weight_map object)");
  std::set<std::string> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) return format_error(index_path + ": weight_map entry '" + it.key() + "' is not a file name");
    if (it->get<std::string>().find('/') != std::string::npos || it->get<std::string>() == "..")
      return format_error(index_path + ": shard name '" + it->get<std::string>() + "' must be a plain file name");
    if (!keep || keep(it.key())) files.insert(it->get<std::string>());
  }
  for (const auto& f : files) KILN_RETURN_IF_ERROR(c.add_file(dir + "/" + f, keep));
  size_t declined = 0;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (keep && !keep(it.key())) {
      ++declined;
      continue;
    }
    const TensorEntry* e = c.find(it.key());
    if (e == nullptr || e->file != dir + "/" + it->get<std::string>())
      return format_error(index_path + ": tensor '" + it.key() + "' is listed for " + it->get<std::string>() +
                          " but that file does not hold it");
  }
  c.skipped_ = std::max(c.skipped_, declined);  // shards never opened count through the index
  return c;
}

const TensorEntry* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::create(const std::string& path, std::vector<Spec> specs,
                                                                     const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& s : specs) {
    if (header.contains(s.name)) return invalid_argument(path + ": tensor '" + s.name + "' declared twice");
    uint64_t bytes = static_cast<uint64_t>(s.shape.numel()) * dtype_size(s.dtype);
    json shape = json::array();
    for (int i = 0; i < s.shape.rank(); ++i) shape.push_back(s.shape[i]);
    header[s.name] = {{"dtype", safetensors_name(s.dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');  // data starts 8-byte aligned
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->expected_ = offset;
  w->f_ = std::fopen(path.c_str(), "wb");
  if (w->f_ == nullptr) return io_error(path + ": cannot open for writing: " + std::strerror(errno));
  uint64_t len = text.size();
  if (std::fwrite(&len, 8, 1, w->f_) != 1 || std::fwrite(text.data(), 1, text.size(), w->f_) != text.size())
    return io_error(path + ": write failed");
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_) std::fclose(f_);
}

Status SafetensorsWriter::write(const void* data, size_t bytes) {
  if (written_ + bytes > expected_) return internal_error(path_ + ": more tensor data written than declared");
  if (std::fwrite(data, 1, bytes, f_) != bytes) return io_error(path_ + ": write failed: " + std::strerror(errno));
  written_ += bytes;
  return {};
}

Status SafetensorsWriter::finish() {
  if (written_ != expected_)
    return internal_error(path_ + ": wrote " + std::to_string(written_) + " of " + std::to_string(expected_) + " bytes");
  int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) return io_error(path_ + ": close failed: " + std::strerror(errno));
  return {};
}

Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.dtype(), t.shape()});
  KILN_ASSIGN_OR_RETURN(auto w, SafetensorsWriter::create(path, specs, metadata));
  for (const auto& [name, t] : tensors) {
    if (!t.is_contiguous()) return invalid_argument(path + ": tensor '" + name + "' is not contiguous");
    KILN_RETURN_IF_ERROR(w->write(t.raw(), t.nbytes()));
  }
  return w->finish();
}

}  // namespace kiln
