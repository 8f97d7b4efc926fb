// Opens the CUDA plugin (worker/device/cuda/cuda_plugin.h) once per process, on first use.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/device/cuda/cuda_plugin.h"

namespace tandem::device {

// Where the plugin is looked for, in order: $TANDEM_CUDA_PLUGIN (a file) when set, else beside
// the installed binary (<exe dir>/../lib/tandem/tandem-cuda.so), the build tree that built this
// binary, and the configured install location (a binary run from its build tree never opens an
// older installed plugin before its own).
std::vector<std::string> CudaPluginCandidates();

// Opens the first of `candidates` that is a plugin of this build (never closed). kUnavailable
// naming every path tried and why it was passed over when none is.
StatusOr<const cuda::PluginApi*> OpenCudaPlugin(const std::vector<std::string>& candidates);

// OpenCudaPlugin(CudaPluginCandidates()), opened by the first call (later calls return the same
// result).
StatusOr<const cuda::PluginApi*> CudaPlugin();

}  // namespace tandem::device
