#include "server/ps/malloc_arenas.h"

#include <malloc.h>

#include <cerrno>
#include <cstdlib>

namespace tandem::ps {

int MallocArenaLimit(const char* env_value) {
  if (env_value != nullptr) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(env_value, &end, 10);
    if (errno == 0 && end != env_value && *end == '\0' && v > 0 && v <= 1024)
      return static_cast<int>(v);
  }
  return kMallocArenas;
}

std::string LimitMallocArenas() {
  const char* env = std::getenv("MALLOC_ARENA_MAX");
  const int limit = MallocArenaLimit(env);
  if (mallopt(M_ARENA_MAX, limit) != 1)
    return "malloc arenas: glibc refused a limit of " + std::to_string(limit);
  return "malloc arenas: at most " + std::to_string(limit) +
         (env != nullptr && limit != kMallocArenas ? " (MALLOC_ARENA_MAX)"
                                                   : " (MALLOC_ARENA_MAX changes it)");
}

}  // namespace tandem::ps
