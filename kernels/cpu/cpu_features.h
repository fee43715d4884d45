// Run-time detection of the x86 SIMD extensions the CPU kernels can use.
//
// Contract: DetectCpuFeatures() is cheap after the first call and thread-safe. The
// environment variable CASCADE_CPU_ISA=scalar|avx2|avx512 caps the level used (for tests
// and benchmarks of each code path); it can never enable what the CPU lacks.
#ifndef CASCADE_KERNELS_CPU_CPU_FEATURES_H_
#define CASCADE_KERNELS_CPU_CPU_FEATURES_H_

#include <string>

namespace cascade {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
enum class CpuVendor { kOther = 0, kAmd = 1, kIntel = 2 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  // CPUID leaf 1's display family and model (family 0x19: Zen 3 / Zen 4, 0x1A: Zen 5):
  // the kernels tune tile shapes by core where the same code runs at different rates.
  CpuVendor vendor = CpuVendor::kOther;
  int family = 0;
  int model = 0;
  std::string model_name;

  CpuIsa best() const;
  std::string Describe() const;
  // AMD family 19h with AVX-512: Zen 4 (Zen 3, the same family, has none), whose 512-bit
  // operations run as two 256-bit halves; the kernels' per-core choices (kernel_table.h).
  bool zen4() const;
};

const CpuFeatures& DetectCpuFeatures();
// The best ISA both the CPU and CASCADE_CPU_ISA allow.
CpuIsa SelectedIsa();
const char* CpuIsaName(CpuIsa isa);

}  // namespace cascade

#endif  // CASCADE_KERNELS_CPU_CPU_FEATURES_H_
