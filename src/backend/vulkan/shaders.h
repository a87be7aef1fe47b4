// The compute shaders, compiled from shaders/*.comp to SPIR-V at build time and embedded
// (embed_shaders.cmake): each module by its file's name.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kiln::vulkan {

struct ShaderModule {
  std::string_view name;          // "rms_norm" for shaders/rms_norm.comp
  std::span<const uint32_t> code;  // SPIR-V words
};

std::span<const ShaderModule> shader_modules();

}  // namespace kiln::vulkan
