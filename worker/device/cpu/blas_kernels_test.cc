#include "worker/device/cpu/blas_kernels.h"

#include <cblas.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace tandem::device {
namespace {

CpuFeatures Avx512() {
  CpuFeatures f;
  f.avx2 = f.fma = f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  return f;
}

CpuFeatures Avx2() {
  CpuFeatures f;
  f.avx2 = f.fma = true;
  return f;
}

TEST(BlasKernelsTest, PreferredCoreFollowsTheWidestVectorsTheCpuHas) {
  EXPECT_EQ(PreferredBlasCore(Avx512()), "SkylakeX");
  EXPECT_EQ(PreferredBlasCore(Avx2()), "Haswell");
  CpuFeatures partial = Avx512();
  partial.avx512bw = false;  // AVX-512F alone (Knights Landing): OpenBLAS's SkylakeX needs BW
  EXPECT_EQ(PreferredBlasCore(partial), "Haswell");
  CpuFeatures no_fma = Avx2();
  no_fma.fma = false;
  EXPECT_EQ(PreferredBlasCore(no_fma), "");
  EXPECT_EQ(PreferredBlasCore(CpuFeatures{}), "");
}

TEST(BlasKernelsTest, FallbacksAreTheCoresWithoutAvx2) {
  for (const char* old : {"Prescott", "prescott", "Nehalem", "Sandybridge", "Core2", "Unknown", ""})
    EXPECT_TRUE(IsFallbackBlasCore(old)) << old;
  for (const char* modern : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "sapphirerapids"})
    EXPECT_FALSE(IsFallbackBlasCore(modern)) << modern;
}

TEST(BlasKernelsTest, PinsOnlyAFallbackOnACpuWithBetterKernelsAndNeverOverAUsersChoice) {
  EXPECT_EQ(BlasCoreToPin("", "Prescott", Avx512()), "SkylakeX");
  EXPECT_EQ(BlasCoreToPin("", "Prescott", Avx2()), "Haswell");
  EXPECT_EQ(BlasCoreToPin("", "Cooperlake", Avx512()), std::nullopt) << "OpenBLAS knew the CPU";
  EXPECT_EQ(BlasCoreToPin("Prescott", "Prescott", Avx512()), std::nullopt)
      << "OPENBLAS_CORETYPE is the user's";
  EXPECT_EQ(BlasCoreToPin("", "Prescott", CpuFeatures{}), std::nullopt) << "an SSE-only CPU";
}

// This process: OpenBLAS chose before main. Whatever it chose, the description names it, and
// on this machine the choice is never a fallback left in place silently.
TEST(BlasKernelsTest, TheDescriptionNamesTheKernelsInUseAndWhoChoseThem) {
  const std::string core = openblas_get_corename();
  const std::string d = BlasKernelsDescription();
  EXPECT_EQ(d.rfind(core, 0), 0u) << d;
  const char* pinned = std::getenv("OPENBLAS_CORETYPE");
  std::string expected = "OpenBLAS's choice";
  if (pinned != nullptr && *pinned != '\0') {
    expected = "OPENBLAS_CORETYPE";
  } else if (BlasCoreToPin("", core, DetectCpuFeatures())) {
    expected = "set OPENBLAS_CORETYPE=";
  }
  EXPECT_NE(d.find(expected), std::string::npos) << d;
}

TEST(BlasKernelsTest, DetectedFeaturesAreConsistent) {
  const CpuFeatures f = DetectCpuFeatures();
  EXPECT_TRUE(!f.avx512f || f.avx2) << "every AVX-512 CPU has AVX2";
  EXPECT_EQ(f.avx2, static_cast<bool>(__builtin_cpu_supports("avx2")));
}

}  // namespace
}  // namespace tandem::device
