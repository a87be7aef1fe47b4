// adapter_config.json (LoRA settings as PEFT writes them): parsed (nesting limit) and read; a
// config it accepts must survive its own writer: written and read back, the same settings.
#include <nlohmann/json.hpp>

#include "core/json_text.h"
#include "fuzz_target.h"
#include "model/lora_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = kiln::parse_json(kiln::fuzz::as_text(data, size), "adapter_config.json");
  if (!j.ok()) return 0;
  auto c = kiln::LoraConfig::from_json(*j, "adapter_config.json");
  if (!c.ok()) return 0;
  auto again = kiln::LoraConfig::from_json(c->to_json(), "written");
  kiln::fuzz::expect(again.ok(), "a written config reads back");
  kiln::fuzz::expect(again->rank == c->rank && again->alpha == c->alpha && again->use_rslora == c->use_rslora &&
                         again->targets == c->targets && again->layers == c->layers &&
                         again->base_model == c->base_model && again->dropout == c->dropout,
                     "the written config reads back the same");
  return 0;
}
