#include "common/build_info.h"

#include "tandem_build_id.h"  // generated at build time by cmake/BuildId.cmake

namespace tandem {

std::string_view Version() { return TANDEM_VERSION; }
std::string_view GitCommit() { return TANDEM_GIT_COMMIT; }
std::string_view BuildId() { return TANDEM_VERSION "+g" TANDEM_GIT_COMMIT; }

}  // namespace tandem
