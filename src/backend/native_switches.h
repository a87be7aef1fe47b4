// Every environment variable that changes which native path a backend takes or what it reports
// (kernel variants, the emulated target, a memory limit, the device chosen, profiling), written
// once here: the capability report lists them with the values in effect, evidence and bench
// documents record those set, docs/cuda.md renders the CUDA rows, and the switch audit sets each
// to check the rule that a switch picks among native paths and never turns a native op into a
// host fallback. Each backend still reads its own variables where it always did.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct NativeSwitch {
  std::string_view backend;  // the backend whose dispatch or capabilities it changes
  std::string_view setting;  // "KILN_CUDA_GEMV=0"; alternatives separated by " / "
  std::string_view effect;   // what the setting does, against the default
  // The values the switch audit sets, separated by spaces; "" where none can be set on its own
  // (the effect says why).
  std::string_view audit;
};

std::span<const NativeSwitch> native_switches();

// The variable a setting names ("KILN_CUDA_GEMV" of "KILN_CUDA_GEMV=0").
std::string_view switch_variable(const NativeSwitch& s);
std::vector<std::string> switch_audit_values(const NativeSwitch& s);

// The listed variables set in this process's environment, by name (empty values count as unset).
std::map<std::string, std::string> native_switches_in_effect();

// One backend's rows as a Markdown table (docs/cuda.md holds the CUDA one between its markers).
std::string native_switches_markdown(std::string_view backend);

}  // namespace kiln
