// The configuration reference generated from the schema: a Markdown table of every key with its
// type, default, allowed values, environment variable and meaning (`kiln config --markdown`,
// checked in as part of docs/configuration.md).
#pragma once

#include <string>

namespace kiln {

std::string config_reference_markdown();

}  // namespace kiln
