#include "worker/device/cpu/blas_kernels.h"

#include <cblas.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include <array>
#include <cstdio>

namespace tandem::device {
namespace {

// Set by PinBlasKernels before it executes the program again: OpenBLAS's own choice, for the
// description, and the guard against executing twice. Children inherit it with the pin.
constexpr char kOpenBlasChose[] = "TANDEM_OPENBLAS_CHOSE";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

CpuFeatures DetectCpuFeatures() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  return f;
}

std::string PreferredBlasCore(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  return "";
}

bool IsFallbackBlasCore(std::string_view core) {
  // OpenBLAS's x86-64 kernel sets without AVX2 (the names of driver/others/dynamic.c).
  static constexpr std::array<std::string_view, 20> kOld = {
      "Unknown",      "Katmai",    "Coppermine",  "Northwood", "Prescott",  "Banias",    "Atom",
      "Core2",        "Penryn",    "Dunnington",  "Nehalem",   "Athlon",    "Opteron",   "Nano",
      "Opteron_SSE3", "Barcelona", "Sandybridge", "Bobcat",    "Bulldozer", "Piledriver"};
  if (core.empty()) return true;
  for (std::string_view old : kOld)
    if (core.size() == old.size() && ::strncasecmp(core.data(), old.data(), core.size()) == 0)
      return true;
  return false;
}

std::optional<std::string> BlasCoreToPin(std::string_view pinned, std::string_view chosen,
                                         const CpuFeatures& f) {
  if (!pinned.empty() || !IsFallbackBlasCore(chosen)) return std::nullopt;
  std::string better = PreferredBlasCore(f);
  if (better.empty()) return std::nullopt;
  return better;
}

void PinBlasKernels(char** argv) {
  if (!Env(kOpenBlasChose).empty()) return;  // executed again already, or a child of one
  const std::string chosen = openblas_get_corename();
  const auto pin = BlasCoreToPin(Env("OPENBLAS_CORETYPE"), chosen, DetectCpuFeatures());
  if (!pin) return;
  ::setenv(kOpenBlasChose, chosen.c_str(), 1);
  ::setenv("OPENBLAS_CORETYPE", pin->c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // Still here: exec failed. The slower kernels stay, and the description says so.
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(kOpenBlasChose);
  std::fprintf(stderr, "tandem: could not execute itself again to pin OpenBLAS's %s kernels\n",
               pin->c_str());
}

std::string BlasKernelsDescription() {
  const std::string core = openblas_get_corename();
  if (const std::string chose = Env(kOpenBlasChose); !chose.empty())
    return core + " (pinned by tandem: OpenBLAS chose " + chose + ")";
  if (!Env("OPENBLAS_CORETYPE").empty()) return core + " (OPENBLAS_CORETYPE)";
  if (const auto better = BlasCoreToPin("", core, DetectCpuFeatures()))
    return core + " (OpenBLAS's fallback; this CPU has " + *better +
           " kernels: set OPENBLAS_CORETYPE=" + *better + ")";
  return core + " (OpenBLAS's choice for this CPU)";
}

}  // namespace tandem::device
