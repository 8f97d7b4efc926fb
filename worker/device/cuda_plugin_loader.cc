#include "worker/device/cuda_plugin_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "tandem_build_id.h"

namespace tandem::device {

constexpr const char* kBuild = TANDEM_VERSION " " TANDEM_GIT_COMMIT;

std::vector<std::string> CudaPluginCandidates() {
  if (const char* forced = std::getenv("TANDEM_CUDA_PLUGIN"); forced != nullptr && *forced)
    return {forced};
  std::vector<std::string> out;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path() / "../lib/tandem/tandem-cuda.so").lexically_normal());
  for (const char* p : {TANDEM_CUDA_PLUGIN_BUILT, TANDEM_CUDA_PLUGIN_INSTALLED}) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

StatusOr<const cuda::PluginApi*> OpenCudaPlugin(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& path : candidates) {
    if (!std::filesystem::exists(path)) {
      tried += "\n  " + path + ": not there";
      continue;
    }
    // Never closed: backends made by it live until the process ends.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      tried += "\n  " + path + ": " + ::dlerror();
      continue;
    }
    using Entry = const cuda::PluginApi* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, "tandem_cuda_plugin_api"));
    const cuda::PluginApi* api = entry == nullptr ? nullptr : entry();
    if (api == nullptr) {
      tried += "\n  " + path + ": not a tandem CUDA plugin";
      continue;
    }
    if (api->abi != cuda::kPluginAbi || std::string(api->build) != kBuild) {
      tried += "\n  " + path + ": from another build (" + api->build + ", this binary is " +
               kBuild + ")";
      continue;
    }
    return api;
  }
  return Status::Unavailable("the CUDA plugin tandem-cuda.so could not be opened; tried:" + tried);
}

StatusOr<const cuda::PluginApi*> CudaPlugin() {
  static std::once_flag once;
  static StatusOr<const cuda::PluginApi*>* result = nullptr;
  std::call_once(once, [] {
    result = new StatusOr<const cuda::PluginApi*>(OpenCudaPlugin(CudaPluginCandidates()));
  });
  return *result;
}

}  // namespace tandem::device
