#include "common/determinism_class.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(DeterminismClassTest, StableAndNamesEveryPart) {
  const std::string c = DeterminismClass(1, "Haswell");
  EXPECT_EQ(DeterminismClass(1, "Haswell"), c);
  EXPECT_EQ(c, "cpu=" + CpuIsaLevel() + ";blas=openblas/Haswell;blas_threads=1;gpu=none");
}

TEST(DeterminismClassTest, EveryPartChangesTheClass) {
  const std::string c = DeterminismClass(1, "Haswell");
  EXPECT_NE(DeterminismClass(2, "Haswell"), c);
  EXPECT_NE(DeterminismClass(1, "SkylakeX"), c);
  const std::string gpu = DeterminismClass(1, "Haswell", "H100/132sm/cuda12.4");
  EXPECT_NE(gpu, c);
  EXPECT_NE(gpu.find(";gpu=H100/132sm/cuda12.4"), std::string::npos) << gpu;
}

// The class is compared and parsed as `key=value;...`: no part may forge another key.
TEST(DeterminismClassTest, PartsCannotBreakTheLayout) {
  EXPECT_EQ(DeterminismClass(4, "Has;gpu=x", "A 100\n"),
            "cpu=" + CpuIsaLevel() + ";blas=openblas/Has_gpu_x;blas_threads=4;gpu=A_100_");
  EXPECT_NE(DeterminismClass(4, "").find(";blas=openblas/unknown;"), std::string::npos);
}

TEST(DeterminismClassTest, IsaLevelIsAPsAbiLevelOnX86) {
  const std::string isa = CpuIsaLevel();
#if defined(__x86_64__)
  ASSERT_EQ(isa.size(), 9u) << isa;
  EXPECT_EQ(isa.substr(0, 8), "x86-64-v");
  EXPECT_GE(isa[8], '1');
  EXPECT_LE(isa[8], '4');
  // SSE2 is part of x86-64 itself; AVX2 without level 3 would mean the probe is broken.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2")) {
    EXPECT_GE(isa[8], '3') << isa;
  }
#else
  EXPECT_FALSE(isa.empty());
#endif
}

}  // namespace
}  // namespace tandem
