// The CUDA backend's tuning switches (tuning.h reads them): each variable, its values and what
// it does, written once here. docs/cuda.md's "Tuning switches" table is rendered from this list
// (tuning_switches_markdown; a test holds the document to it).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kiln::cuda {

struct TuningSwitch {
  std::string_view setting;  // "KILN_CUDA_GEMV=0"; alternatives separated by " / " ("... / =all")
  std::string_view effect;   // what the setting does, against the default
};

std::span<const TuningSwitch> tuning_switches();

// The variable a setting names ("KILN_CUDA_GEMV" of "KILN_CUDA_GEMV=0").
std::string_view switch_variable(const TuningSwitch& s);

// The table as docs/cuda.md holds it, between its switches markers.
std::string tuning_switches_markdown();

}  // namespace kiln::cuda
