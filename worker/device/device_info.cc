#include "worker/device/device_info.h"

#include "worker/device/cuda_plugin_loader.h"

namespace tandem::device {

std::string DeviceReport::ToString() const {
  if (!cuda_compiled) return "cuda: not compiled in";
  std::string s = "cuda: " + std::to_string(device_count) + " device(s)";
  for (const auto& d : devices) s += "; " + d;
  if (!error.empty()) s += " (" + error + ")";
  if (!library_versions.empty()) s += "; " + library_versions;
  return s;
}

#ifdef TANDEM_HAVE_CUDA

DeviceReport ProbeDevices() {
  DeviceReport r;
  r.cuda_compiled = true;
  StatusOr<const cuda::PluginApi*> plugin = CudaPlugin();
  if (!plugin.ok()) {
    r.error = plugin.status().message();
    return r;
  }
  cuda::ProbeResult p = plugin.value()->probe();
  r.device_count = p.device_count;
  r.error = p.error;
  r.devices = p.devices;
  r.library_versions = p.versions;
  return r;
}

Status RunDeviceSelfTest() {
  TANDEM_ASSIGN_OR_RETURN(const cuda::PluginApi* plugin, CudaPlugin());
  std::string error;
  switch (plugin->self_test(&error)) {
    case cuda::SelfTestResult::kOk:
      return Status::Ok();
    case cuda::SelfTestResult::kNoDevice:
      return Status::Unavailable(error);
    case cuda::SelfTestResult::kFailed:
      return Status::Internal(error);
  }
  return Status::Internal("unreachable");
}

#else

DeviceReport ProbeDevices() { return DeviceReport{}; }

Status RunDeviceSelfTest() {
  return Status::Unavailable("built without CUDA (nvcc was not found)");
}

#endif

}  // namespace tandem::device
