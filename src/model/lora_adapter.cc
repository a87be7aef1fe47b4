#include "model/lora_adapter.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/atomic_publish.h"
#include "model/safetensors.h"

namespace kiln {

namespace {

constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr const char* kConfigFile = "adapter_config.json";

struct Slot {
  int64_t layer;
  LoraTarget target;
  LoraDims dims;
};

// Every (layer, projection) the config adapts in this model, layer-major, targets in enum order.
Result<std::vector<Slot>> adapted_slots(const LoraConfig& cfg, const ModelConfig& model, const std::string& src) {
  for (int64_t l : cfg.layers)
    if (l >= model.num_layers)
      return invalid_argument(src + ": layers_to_transform names layer " + std::to_string(l) + ", the model has " +
                              std::to_string(model.num_layers));
  std::vector<Slot> slots;
  for (int64_t i = 0; i < model.num_layers; ++i) {
    if (!cfg.has_layer(i)) continue;
    for (LoraTarget t : cfg.targets)
      if (lora_target_in_layer(t, model.layer_types[i])) slots.push_back({i, t, lora_target_dims(model, t)});
  }
  if (slots.empty())
    return invalid_argument(src + ": target_modules and layers_to_transform select no projection of this model");
  return slots;
}

}  // namespace

int64_t LoraAdapter::bytes() const {
  int64_t n = 0;
  for (const auto& layer : layers_)
    for (const LoraFactors& f : layer)
      if (f.defined()) n += static_cast<int64_t>(f.a.nbytes() + f.b.nbytes());
  return n;
}

std::string LoraAdapter::tensor_name(int64_t layer, LoraTarget t, bool b) const {
  return prefix_ + "layers." + std::to_string(layer) + "." + std::string(lora_target_parent(t)) + "." +
         std::string(lora_target_name(t)) + (b ? ".lora_B.weight" : ".lora_A.weight");
}

Result<LoraAdapter> LoraAdapter::load(const std::string& dir, const ModelConfig& model, StorageFacet& storage) {
  LoraAdapter ad;
  KILN_ASSIGN_OR_RETURN(ad.config_, LoraConfig::load(dir));
  KILN_ASSIGN_OR_RETURN(std::vector<Slot> slots, adapted_slots(ad.config_, model, dir + "/" + kConfigFile));
  const std::string path = dir + "/" + kWeightsFile;
  if (!std::filesystem::exists(path))
    return not_found(path + ": no such file (an adapter directory holds " + kWeightsFile + ")");
  KILN_ASSIGN_OR_RETURN(Checkpoint file, Checkpoint::open_file(path));
  for (const auto& [name, e] : file.tensors())
    if (name.rfind(kNestedPrefix, 0) == 0) {
      ad.prefix_ = kNestedPrefix;
      break;
    }

  // 1. Validate every tensor before touching the device.
  const int64_t r = ad.config_.rank;
  std::map<std::string, Shape> expected;
  for (const Slot& s : slots) {
    expected[ad.tensor_name(s.layer, s.target, false)] = Shape{r, s.dims.in};
    expected[ad.tensor_name(s.layer, s.target, true)] = Shape{s.dims.out, r};
  }
  for (const auto& [name, e] : file.tensors())
    if (!expected.count(name))
      return invalid_argument("unexpected tensor '" + name + "' in " + path +
                              " (not lora_A/lora_B of a projection that adapter_config.json targets in this model)");
  for (const auto& [name, shape] : expected) {
    const TensorEntry* e = file.find(name);
    if (e == nullptr)
      return not_found(path + " is missing tensor '" + name + "' (expected shape " + shape.to_string() + ")");
    if (!(e->tensor.shape() == shape))
      return invalid_argument("tensor '" + name + "' in " + path + " has shape " + e->tensor.shape().to_string() +
                              ", expected " + shape.to_string());
    if (!is_float(e->tensor.dtype()))
      return invalid_argument("tensor '" + name + "' in " + path + " has dtype " +
                              std::string(dtype_name(e->tensor.dtype())) + ", expected f32, bf16 or f16");
  }

  // 2. Copy onto the device (never aliasing the mapped file: the adapter may be trained or
  // saved over its own directory).
  auto upload = [&](const std::string& name) -> Result<Tensor> {
    const Tensor& src = file.find(name)->tensor;
    KILN_ASSIGN_OR_RETURN(Tensor dst, storage.allocate(src.shape(), src.dtype()));
    KILN_RETURN_IF_ERROR(storage.copy_from_host(src, dst));
    return dst;
  };
  ad.layers_.resize(static_cast<size_t>(model.num_layers));
  for (const Slot& s : slots) {
    LoraFactors& f = ad.factors(s.layer, s.target);
    KILN_ASSIGN_OR_RETURN(f.a, upload(ad.tensor_name(s.layer, s.target, false)));
    KILN_ASSIGN_OR_RETURN(f.b, upload(ad.tensor_name(s.layer, s.target, true)));
  }
  return ad;
}

Result<LoraAdapter> LoraAdapter::init(const LoraConfig& config, const ModelConfig& model, uint64_t seed,
                                      StorageFacet& storage) {
  KILN_RETURN_IF_ERROR(config.validate("LoraAdapter::init"));
  LoraAdapter ad;
  ad.config_ = config;
  KILN_ASSIGN_OR_RETURN(std::vector<Slot> slots, adapted_slots(config, model, "LoraAdapter::init"));
  ad.layers_.resize(static_cast<size_t>(model.num_layers));
  std::mt19937_64 rng(seed);  // its output sequence is fixed by the standard, so adapters are reproducible
  for (const Slot& s : slots) {
    Tensor a = Tensor::empty({config.rank, s.dims.in}, DType::kF32);
    const double bound = std::sqrt(1.0 / static_cast<double>(s.dims.in));
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      a.data<float>()[i] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
    LoraFactors& f = ad.factors(s.layer, s.target);
    KILN_ASSIGN_OR_RETURN(f.a, storage.upload(a));
    KILN_ASSIGN_OR_RETURN(f.b, storage.allocate({s.dims.out, config.rank}, DType::kF32));  // zero-filled
  }
  return ad;
}

Result<LoraAdapter> LoraAdapter::zeros_like(const LoraAdapter& like, StorageFacet& storage) {
  LoraAdapter ad;
  ad.config_ = like.config_;
  ad.prefix_ = like.prefix_;
  ad.layers_.resize(like.layers_.size());
  for (size_t i = 0; i < like.layers_.size(); ++i)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& src = like.layers_[i][t];
      if (!src.defined()) continue;
      LoraFactors& f = ad.layers_[i][t];
      KILN_ASSIGN_OR_RETURN(f.a, storage.allocate(src.a.shape(), DType::kF32));  // zero-filled
      KILN_ASSIGN_OR_RETURN(f.b, storage.allocate(src.b.shape(), DType::kF32));
    }
  return ad;
}

Status LoraAdapter::save(const std::string& dir, StorageFacet& storage) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir + ": cannot create directory: " + ec.message());
  KILN_RETURN_IF_ERROR(config_.validate("LoraAdapter::save"));

  std::vector<SafetensorsWriter::Spec> specs;
  std::vector<const Tensor*> order;
  for (int64_t i = 0; i < num_layers(); ++i)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = layers_[i][t];
      if (!f.defined()) continue;
      for (bool b : {false, true}) {
        const Tensor& x = b ? f.b : f.a;
        specs.push_back({tensor_name(i, static_cast<LoraTarget>(t), b), x.dtype(), x.shape()});
        order.push_back(&x);
      }
    }
  // Each file replaced whole, so an adapter saved over its own folder is never half-written.
  KILN_RETURN_IF_ERROR(write_file_atomically(dir + "/" + kWeightsFile, [&](const std::string& staged) -> Status {
    KILN_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::create(staged, specs, {{"format", "pt"}}));
    for (const Tensor* x : order) {
      Tensor host = Tensor::empty(x->shape(), x->dtype());
      KILN_RETURN_IF_ERROR(storage.copy_to_host(*x, host));
      KILN_RETURN_IF_ERROR(writer->write(host.raw(), host.nbytes()));
    }
    return writer->finish();
  }));
  return write_file_atomically(dir + "/" + kConfigFile, config_.to_json().dump(2) + "\n");
}

}  // namespace kiln
