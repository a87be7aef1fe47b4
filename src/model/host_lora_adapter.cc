#include "model/host_lora_adapter.h"

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

std::string lora_tensor_name(const std::string& prefix, int64_t layer, LoraTarget t, bool b) {
  return prefix + "layers." + std::to_string(layer) + "." + std::string(lora_target_parent(t)) + "." +
         std::string(lora_target_name(t)) + (b ? ".lora_B.weight" : ".lora_A.weight");
}

Result<HostLoraAdapter> HostLoraAdapter::read(const std::string& dir, const ModelConfig& model) {
  HostLoraAdapter ad;
  KILN_ASSIGN_OR_RETURN(ad.config, LoraConfig::load(dir));
  KILN_ASSIGN_OR_RETURN(std::vector<Slot> slots, adapted_slots(ad.config, model, dir + "/" + kConfigFile));
  const std::string path = dir + "/" + kWeightsFile;
  if (!std::filesystem::exists(path))
    return not_found(path + ": no such file (an adapter directory holds " + kWeightsFile + ")");
  KILN_ASSIGN_OR_RETURN(Checkpoint file, Checkpoint::open_file(path));
  for (const auto& [name, e] : file.tensors())
    if (name.rfind(kNestedPrefix, 0) == 0) {
      ad.prefix = kNestedPrefix;
      break;
    }

  const int64_t r = ad.config.rank;
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
  ad.layers.resize(static_cast<size_t>(model.num_layers));
  for (const Slot& s : slots) {
    LoraFactors& f = ad.factors(s.layer, s.target);
    f.a = file.find(ad.tensor_name(s.layer, s.target, false))->tensor;
    f.b = file.find(ad.tensor_name(s.layer, s.target, true))->tensor;
  }
  return ad;
}

Result<HostLoraAdapter> HostLoraAdapter::init(const LoraConfig& config, const ModelConfig& model, uint64_t seed) {
  KILN_RETURN_IF_ERROR(config.validate("LoraAdapter::init"));
  HostLoraAdapter ad;
  ad.config = config;
  KILN_ASSIGN_OR_RETURN(std::vector<Slot> slots, adapted_slots(config, model, "LoraAdapter::init"));
  ad.layers.resize(static_cast<size_t>(model.num_layers));
  std::mt19937_64 rng(seed);  // its output sequence is fixed by the standard, so adapters are reproducible
  for (const Slot& s : slots) {
    LoraFactors& f = ad.factors(s.layer, s.target);
    f.a = Tensor::empty({config.rank, s.dims.in}, DType::kF32);
    const double bound = std::sqrt(1.0 / static_cast<double>(s.dims.in));
    for (int64_t i = 0; i < f.a.numel(); ++i) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      f.a.data<float>()[i] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
    f.b = Tensor::empty({s.dims.out, config.rank}, DType::kF32);  // zeroed
  }
  return ad;
}

Status HostLoraAdapter::write(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir + ": cannot create directory: " + ec.message());
  KILN_RETURN_IF_ERROR(config.validate("LoraAdapter::save"));

  std::vector<SafetensorsWriter::Spec> specs;
  std::vector<const Tensor*> order;
  for (int64_t i = 0; i < num_layers(); ++i)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = layers[i][t];
      if (!f.defined()) continue;
      for (bool b : {false, true}) {
        const Tensor& x = b ? f.b : f.a;
        if (x.device().kind != DeviceKind::kHost || !x.is_contiguous())
          return invalid_argument(dir + ": factor " + tensor_name(i, static_cast<LoraTarget>(t), b) + " (" +
                                  x.describe() + ") is not a contiguous host tensor");
        specs.push_back({tensor_name(i, static_cast<LoraTarget>(t), b), x.dtype(), x.shape()});
        order.push_back(&x);
      }
    }
  // Each file replaced whole, so an adapter saved over its own folder is never half-written.
  KILN_RETURN_IF_ERROR(write_file_atomically(dir + "/" + kWeightsFile, [&](const std::string& staged) -> Status {
    KILN_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::create(staged, specs, {{"format", "pt"}}));
    for (const Tensor* x : order) KILN_RETURN_IF_ERROR(writer->write(x->raw(), x->nbytes()));
    return writer->finish();
  }));
  return write_file_atomically(dir + "/" + kConfigFile, config.to_json().dump(2) + "\n");
}

}  // namespace kiln
