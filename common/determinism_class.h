// The determinism class (PROTOCOLS §5): what a process's floating-point results depend on
// besides the binary, the config and M. Two processes of one class compute bit-identical steps;
// the manifest records the class, and at k = 0 a process of another class is refused (strict)
// or logged as voiding bit-identity (relaxed).
#pragma once

#include <string>
#include <string_view>

namespace tandem {

// The CPU's ISA level: "x86-64-v1" .. "x86-64-v4" on x86-64 (the psABI levels, from
// __builtin_cpu_supports), else the architecture's name ("aarch64", ...). Pure function of the
// machine; safe to call from any thread.
std::string CpuIsaLevel();

// A stable, human-readable class such as
//   cpu=x86-64-v3;blas=openblas/Haswell;blas_threads=1;gpu=none
// `openblas_core` is the core OpenBLAS runs on (openblas_get_corename(), which already honours
// OPENBLAS_CORETYPE); it is passed in so that processes without BLAS (PS, chief) need not link
// it, and an empty one reads "unknown". `gpu` is the GPU part built by the device backend (model,
// SM count, driver and library versions) or "none". Characters that would break the
// `key=value;` layout (';', '=', whitespace, control characters) become '_'.
std::string DeterminismClass(int blas_threads, std::string_view openblas_core,
                             std::string_view gpu = "none");

}  // namespace tandem
