// The build id (version + git commit), compiled in. Registrations carry it so that the chief
// refuses a member built from other code.
#pragma once

#include <string_view>

namespace tandem {

std::string_view Version();    // e.g. "0.1.0"
std::string_view GitCommit();  // short hash, "+dirty" when built from a modified tree
std::string_view BuildId();    // "0.1.0+g1a2b3c4"

}  // namespace tandem
