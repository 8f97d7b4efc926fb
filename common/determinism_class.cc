#include "common/determinism_class.h"

namespace tandem {
namespace {

std::string Sanitized(std::string_view part) {
  if (part.empty()) return "unknown";
  std::string out(part);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (c == ';' || c == '=' || u <= ' ' || u == 0x7f) c = '_';
  }
  return out;
}

#if defined(__x86_64__)
// The psABI levels. GCC 12 answers "x86-64-vN" itself; clang 14 does not know those names, so
// there the level is approximated from the features both compilers name (it misses only the
// few, like CX16 or MOVBE, that every CPU of the level's generation has anyway).
int X86Level() {
  __builtin_cpu_init();
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  if (__builtin_cpu_supports("x86-64-v4")) return 4;
  if (__builtin_cpu_supports("x86-64-v3")) return 3;
  if (__builtin_cpu_supports("x86-64-v2")) return 2;
  return 1;
#else
  const bool v2 = __builtin_cpu_supports("sse3") && __builtin_cpu_supports("ssse3") &&
                  __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("sse4.2") &&
                  __builtin_cpu_supports("popcnt");
  const bool v3 = v2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("fma");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  return v4 ? 4 : v3 ? 3 : v2 ? 2 : 1;
#endif
}
#endif

}  // namespace

std::string CpuIsaLevel() {
#if defined(__x86_64__)
  return "x86-64-v" + std::to_string(X86Level());
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__powerpc64__)
  return "ppc64";
#elif defined(__riscv)
  return "riscv";
#else
  return "unknown";
#endif
}

std::string DeterminismClass(int blas_threads, std::string_view openblas_core,
                             std::string_view gpu) {
  return "cpu=" + CpuIsaLevel() + ";blas=openblas/" + Sanitized(openblas_core) +
         ";blas_threads=" + std::to_string(blas_threads) + ";gpu=" + Sanitized(gpu);
}

}  // namespace tandem
