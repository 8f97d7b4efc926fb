// Preloaded into `tandem` by CliTest (LD_PRELOAD): OpenBLAS "chooses" its SSE3 fallback unless
// OPENBLAS_CORETYPE pins a kernel set, as it does on CPUs it does not recognise. The real
// library still computes; only the name it reports is replaced.
#include <stdlib.h>

extern "C" char* openblas_get_corename(void) {
  static char fallback[] = "Prescott";
  char* pinned = getenv("OPENBLAS_CORETYPE");
  return pinned != nullptr && *pinned != '\0' ? pinned : fallback;
}
