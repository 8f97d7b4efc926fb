#include "worker/device/device_info.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#ifdef TANDEM_HAVE_CUDA
#include "worker/device/cuda_plugin_loader.h"
#endif

namespace tandem::device {
namespace {

TEST(DeviceInfoTest, ProbeMatchesBuild) {
  DeviceReport r = ProbeDevices();
#ifdef TANDEM_HAVE_CUDA
  EXPECT_TRUE(r.cuda_compiled);
  // The library versions come from the linked libraries and need no GPU.
  EXPECT_NE(r.library_versions.find("nccl"), std::string::npos) << r.ToString();
#else
  EXPECT_FALSE(r.cuda_compiled);
  EXPECT_EQ(r.ToString(), "cuda: not compiled in");
#endif
}

TEST(DeviceInfoTest, KernelAndGemmOnDevice0) {
  DeviceReport r = ProbeDevices();
  if (!r.cuda_compiled) GTEST_SKIP() << "built without CUDA (nvcc not found at configure time)";
  if (r.device_count == 0) GTEST_SKIP() << "no CUDA device: " << r.error;
  Status s = RunDeviceSelfTest();
  EXPECT_TRUE(s.ok()) << s;
}

#ifdef TANDEM_HAVE_CUDA

// The CUDA part is a plugin (worker/device/cuda/cuda_plugin.h); these need no device.
TEST(CudaPluginTest, OpensFromTheBuildTreeAndProbes) {
  StatusOr<const cuda::PluginApi*> api = CudaPlugin();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_EQ(api.value()->abi, cuda::kPluginAbi);
  // cuBLAS's version comes from inside the plugin: the binary no longer links cuBLAS.
  EXPECT_NE(api.value()->probe().versions.find("cublas"), std::string::npos);
}

TEST(CudaPluginTest, AMissingOrForeignPluginNamesEveryPathTriedAndWhy) {
  StatusOr<const cuda::PluginApi*> api = OpenCudaPlugin(
      {"/nonexistent/tandem-cuda.so", "/etc/hostname", "/lib/x86_64-linux-gnu/libc.so.6"});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable);
  const std::string& m = api.status().message();
  EXPECT_NE(m.find("/nonexistent/tandem-cuda.so: not there"), std::string::npos) << m;
  EXPECT_NE(m.find("/etc/hostname: "), std::string::npos) << m;  // dlopen's own reason
  EXPECT_NE(m.find("libc.so.6: not a tandem CUDA plugin"), std::string::npos) << m;
}

TEST(CudaPluginTest, TheEnvironmentNamesThePluginFile) {
  ::setenv("TANDEM_CUDA_PLUGIN", "/opt/x/tandem-cuda.so", 1);
  const std::vector<std::string> forced = CudaPluginCandidates();
  ::unsetenv("TANDEM_CUDA_PLUGIN");
  EXPECT_EQ(forced, std::vector<std::string>{"/opt/x/tandem-cuda.so"});
  const std::vector<std::string> usual = CudaPluginCandidates();
  ASSERT_GE(usual.size(), 2u);
  EXPECT_NE(usual.front().find("/lib/tandem/tandem-cuda.so"), std::string::npos);
}

#endif

}  // namespace
}  // namespace tandem::device
