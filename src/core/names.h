// Names a client gives to things Kiln keeps as folders (adapters, eval suites, training
// outputs): one rule for all of them, so that no name can step out of its folder or land on a
// folder Kiln keeps for itself.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln {

// 1 to 64 of [A-Za-z0-9._-], starting with a letter or digit (so never ".", "..", or a hidden
// ".staging-*" folder). `kind` names the thing in the message ("adapter name 'x' ...").
Status check_folder_name(std::string_view kind, const std::string& name);

// Names beside the adapters that Kiln writes itself: "<name>.checkpoints" (a job's checkpoints)
// and "post-eval.<name>" (an adapter under evaluation before it is published).
bool is_reserved_adapter_name(const std::string& name);

}  // namespace kiln
