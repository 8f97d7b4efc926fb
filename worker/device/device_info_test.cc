#include "worker/device/device_info.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tandem::device
