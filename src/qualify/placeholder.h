// `${name}` placeholders: a placeholder fills one whole argv element or environment value, never
// part of one, and is substituted by the runner without any shell.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::qualify {

// Names the runner itself supplies; workloads may not declare variables with these names.
inline constexpr std::string_view kSeedPlaceholder = "seed";
inline constexpr std::string_view kModelPathPlaceholder = "model_path";

// The name when `s` is exactly "${name}" with a well-formed name; nullopt otherwise.
std::optional<std::string> whole_placeholder(std::string_view s);

// Whether `s` contains "${" anywhere (a placeholder attempt).
bool mentions_placeholder(std::string_view s);

// Replaces a whole placeholder by its value; other strings are returned unchanged.
// The caller has validated that every placeholder name is in `values`.
std::string expand_placeholder(const std::string& s, const std::map<std::string, std::string>& values);

}  // namespace kiln::qualify
