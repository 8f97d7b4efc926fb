// Which OpenBLAS kernel set a tandem process runs. OpenBLAS's DYNAMIC_ARCH build picks it from
// CPUID in a static constructor, before main; on CPUs it does not recognise (new AMD parts, VMs
// with a generic CPU model) it falls back to Prescott's SSE3 kernels, about 3x slower for the
// dense step. tandem pins a kernel set the CPU does support instead, unless OPENBLAS_CORETYPE
// already says which, and every process says which one it runs. The kernel set is part of the
// determinism class (PROTOCOLS §5), so a pinned set is also what makes workers on one kind of
// host agree.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tandem::device {

struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
};

// What this CPU supports (CPUID, as the compiler's runtime reports it).
CpuFeatures DetectCpuFeatures();

// The best kernel set of OpenBLAS 0.3.x for `f`: SkylakeX with AVX-512 F/BW/VL/DQ, Haswell with
// AVX2 and FMA; empty below that (OpenBLAS's own choice then stands).
std::string PreferredBlasCore(const CpuFeatures& f);

// Whether `core` (openblas_get_corename()) has no AVX2 kernels: a fallback on any CPU that has
// them.
bool IsFallbackBlasCore(std::string_view core);

// The kernel set to pin, or nullopt to keep OpenBLAS's choice: only when OPENBLAS_CORETYPE is
// unset (`pinned` empty), OpenBLAS chose a fallback, and the CPU has a better set.
std::optional<std::string> BlasCoreToPin(std::string_view pinned, std::string_view chosen,
                                         const CpuFeatures& f);

// First thing in main: when BlasCoreToPin names a kernel set, sets OPENBLAS_CORETYPE to it and
// executes this program again with the same arguments (the pid stays; OpenBLAS reads the
// variable only when it starts). Returns when nothing is to be done, after a re-execution, or
// when exec failed (the process then runs on with the slower kernels, and says so).
void PinBlasKernels(char** argv);

// For logs and `tandem --version`: "Cooperlake (OpenBLAS's choice for this CPU)",
// "SkylakeX (pinned by tandem: OpenBLAS chose Prescott)", "Haswell (OPENBLAS_CORETYPE)".
std::string BlasKernelsDescription();

}  // namespace tandem::device
