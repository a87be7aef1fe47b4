#include "model/lora_adapter.h"

namespace kiln {

Result<LoraAdapter> LoraAdapter::upload(const HostLoraAdapter& host, StorageFacet& storage) {
  LoraAdapter ad;
  ad.config_ = host.config;
  ad.prefix_ = host.prefix;
  ad.layers_.resize(host.layers.size());
  for (int64_t l = 0; l < host.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& src = host.layers[l][t];
      if (!src.defined()) continue;
      LoraFactors& dst = ad.layers_[l][t];
      for (auto [s, d] : {std::pair{&src.a, &dst.a}, std::pair{&src.b, &dst.b}}) {
        // allocate + copy, not StorageFacet::upload, which may alias the host tensor on the CPU.
        KILN_ASSIGN_OR_RETURN(*d, storage.allocate(s->shape(), s->dtype()));
        KILN_RETURN_IF_ERROR(storage.copy_from_host(*s, *d));
      }
    }
  return ad;
}

Result<HostLoraAdapter> LoraAdapter::download(StorageFacet& storage) const {
  HostLoraAdapter host;
  host.config = config_;
  host.prefix = prefix_;
  host.layers.resize(layers_.size());
  for (int64_t l = 0; l < num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& src = layers_[l][t];
      if (!src.defined()) continue;
      LoraFactors& dst = host.layers[l][t];
      for (auto [s, d] : {std::pair{&src.a, &dst.a}, std::pair{&src.b, &dst.b}}) {
        *d = Tensor::empty(s->shape(), s->dtype());
        KILN_RETURN_IF_ERROR(storage.copy_to_host(*s, *d));
      }
    }
  return host;
}

int64_t LoraAdapter::bytes() const {
  int64_t n = 0;
  for (const auto& layer : layers_)
    for (const LoraFactors& f : layer)
      if (f.defined()) n += static_cast<int64_t>(f.a.nbytes() + f.b.nbytes());
  return n;
}

Result<LoraAdapter> LoraAdapter::load(const std::string& dir, const ModelConfig& model, StorageFacet& storage) {
  KILN_ASSIGN_OR_RETURN(HostLoraAdapter host, HostLoraAdapter::read(dir, model));
  return upload(host, storage);
}

Result<LoraAdapter> LoraAdapter::init(const LoraConfig& config, const ModelConfig& model, uint64_t seed,
                                      StorageFacet& storage) {
  KILN_ASSIGN_OR_RETURN(HostLoraAdapter host, HostLoraAdapter::init(config, model, seed));
  return upload(host, storage);
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
  KILN_ASSIGN_OR_RETURN(HostLoraAdapter host, download(storage));
  return host.write(dir);
}

}  // namespace kiln
