#include "model/merge_lora.h"

#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "core/atomic_publish.h"
#include "core/dtype.h"
#include "model/host_lora_adapter.h"
#include "model/safetensors.h"

namespace kiln {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// W (any float dtype) plus scale * B A, in double, stored back in W's dtype.
std::vector<uint8_t> merged_bytes(const Tensor& w, const LoraFactors& f, double scale) {
  const int64_t out = w.shape()[0], in = w.shape()[1], r = f.a.shape()[0];
  std::vector<float> wf(static_cast<size_t>(out * in)), a(static_cast<size_t>(r * in)), b(static_cast<size_t>(out * r));
  to_f32(w.dtype(), w.raw(), wf.data(), wf.size());
  to_f32(f.a.dtype(), f.a.raw(), a.data(), a.size());
  to_f32(f.b.dtype(), f.b.raw(), b.data(), b.size());
  std::vector<double> row(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) row[i] = 0;
    for (int64_t k = 0; k < r; ++k) {
      const double bk = b[o * r + k];
      const float* ak = a.data() + k * in;
      for (int64_t i = 0; i < in; ++i) row[i] += bk * ak[i];
    }
    float* wo = wf.data() + o * in;
    for (int64_t i = 0; i < in; ++i) wo[i] = static_cast<float>(wo[i] + scale * row[i]);
  }
  std::vector<uint8_t> bytes(w.nbytes());
  switch (w.dtype()) {
    case DType::kF32: std::memcpy(bytes.data(), wf.data(), bytes.size()); break;
    case DType::kBF16: f32_to_bf16(wf.data(), reinterpret_cast<uint16_t*>(bytes.data()), wf.size()); break;
    default: f32_to_f16(wf.data(), reinterpret_cast<uint16_t*>(bytes.data()), wf.size()); break;
  }
  return bytes;
}

}  // namespace

Status merge_lora_into_checkpoint(const std::string& model_dir, const std::string& adapter_dir, const std::string& out_dir) {
  namespace fs = std::filesystem;
  if (fs::exists(out_dir)) return failed_precondition(out_dir + ": already exists; a merge writes a new folder");
  KILN_ASSIGN_OR_RETURN(ModelConfig model, ModelConfig::load(model_dir));
  KILN_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model_dir));
  KILN_ASSIGN_OR_RETURN(HostLoraAdapter adapter, HostLoraAdapter::read(adapter_dir, model));

  // The checkpoint's name of each adapted projection: its own prefix (the multimodal layout nests
  // the language model), then the path PEFT's factor names share.
  std::string prefix = "model.";
  for (const auto& [name, e] : ckpt.tensors())
    if (starts_with(name, "model.language_model.")) prefix = "model.language_model.";
  std::map<std::string, const LoraFactors*> merges;
  for (int64_t l = 0; l < adapter.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = adapter.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      std::string name = lora_tensor_name(prefix, l, static_cast<LoraTarget>(t), false);
      name.replace(name.size() - std::string("lora_A.weight").size(), std::string::npos, "weight");
      const TensorEntry* w = ckpt.find(name);
      if (w == nullptr) return not_found(model_dir + ": the checkpoint has no tensor '" + name + "' for the adapter's factors");
      const DType d = w->tensor.dtype();
      if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16)
        return invalid_argument(w->file + ": tensor '" + name + "' has dtype " + std::string(dtype_name(d)) +
                                "; a merge takes f32, bf16 or f16 projections");
      const Shape expect{f.b.shape()[0], f.a.shape()[1]};
      if (w->tensor.shape() != expect)
        return invalid_argument(w->file + ": tensor '" + name + "' has shape " + w->tensor.shape().to_string() +
                                ", the adapter's factors make " + expect.to_string());
      merges[name] = &f;
    }

  const fs::path out(out_dir);
  KILN_ASSIGN_OR_RETURN(StagedFolder staged, StagedFolder::create(out.parent_path().string(), out.filename().string()));
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [name, e] : ckpt.tensors()) specs.push_back({name, e.tensor.dtype(), e.tensor.shape()});
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> writer,
                        SafetensorsWriter::create(staged.path() + "/model.safetensors", specs, ckpt.metadata()));
  const double scale = adapter.config.scale();
  for (const auto& [name, e] : ckpt.tensors()) {
    auto m = merges.find(name);
    if (m == merges.end()) {
      KILN_RETURN_IF_ERROR(writer->write(e.tensor.raw(), e.tensor.nbytes()));
    } else {
      const std::vector<uint8_t> bytes = merged_bytes(e.tensor, *m->second, scale);
      KILN_RETURN_IF_ERROR(writer->write(bytes.data(), bytes.size()));
    }
  }
  KILN_RETURN_IF_ERROR(writer->finish());
  std::error_code ec;
  for (const fs::directory_entry& f : fs::directory_iterator(model_dir, ec)) {
    const std::string n = f.path().filename().string();
    // The checkpoint's own files (one file or shards and their index) are replaced by the one written.
    const bool weights = (n.starts_with("model") && n.ends_with(".safetensors")) || n == "model.safetensors.index.json";
    if (!f.is_regular_file() || weights) continue;
    if (!fs::copy_file(f.path(), fs::path(staged.path()) / n, ec))
      return io_error(f.path().string() + ": cannot copy into the merged checkpoint: " + ec.message());
  }
  if (ec) return io_error(model_dir + ": cannot list: " + ec.message());
  return staged.publish(PublishMode::kCreateNew).status();
}

}  // namespace kiln
