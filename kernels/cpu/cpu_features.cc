#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace cascade {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t Xgetbv() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // CPUID plus the OS's XSAVE state (XGETBV): a feature counts only when the OS saves its
  // registers.
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char id[13] = {};
    std::memcpy(id, &b, 4);
    std::memcpy(id + 4, &d, 4);
    std::memcpy(id + 8, &c, 4);
    if (std::strcmp(id, "AuthenticAMD") == 0) f.vendor = CpuVendor::kAmd;
    if (std::strcmp(id, "GenuineIntel") == 0) f.vendor = CpuVendor::kIntel;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    // Display family = base + extended (when base is 0xF); model takes the extended bits
    // when the base family is 6 or 0xF.
    const int base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    f.family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
    f.model = base_family == 0x6 || base_family == 0xF ? base_model | (((a >> 16) & 0xF) << 4)
                                                         : base_model;
    const bool osxsave = c & (1u << 27);
    const uint64_t xcr0 = osxsave ? Xgetbv() : 0;
    const bool avx_os = (xcr0 & 0x6) == 0x6;
    const bool avx512_os = (xcr0 & 0xe6) == 0xe6;
    const bool avx = avx_os && (c & (1u << 28));
    f.fma = avx && (c & (1u << 12));
    f.f16c = avx && (c & (1u << 29));
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = avx && (b & (1u << 5));
      f.avx512f = avx512_os && (b & (1u << 16));
      f.avx512dq = avx512_os && (b & (1u << 17));
      f.avx512bw = avx512_os && (b & (1u << 30));
      f.avx512vl = avx512_os && (b & (1u << 31));
      f.avx512vnni = avx512_os && (c & (1u << 11));
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = avx512_os && (a & (1u << 5));
  }
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) f.model_name = line.substr(pos + 2);
      break;
    }
  }
  return f;
}

}  // namespace

CpuIsa CpuFeatures::best() const {
  if (avx512f && avx512bw && avx512vl && avx512dq && avx2 && fma && f16c) {
    return CpuIsa::kAvx512;
  }
  if (avx2 && fma && f16c) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

bool CpuFeatures::zen4() const { return vendor == CpuVendor::kAmd && family == 0x19 && avx512f; }

std::string CpuFeatures::Describe() const {
  std::string s = model_name.empty() ? "unknown CPU" : model_name;
  if (family != 0) {
    char fm[48];
    std::snprintf(fm, sizeof fm, " (family 0x%x, model 0x%x)", family, model);
    s += fm;
  }
  s += " [";
  const std::pair<bool, const char*> flags[] = {{avx2, "avx2"},
                                                {fma, "fma"},
                                                {f16c, "f16c"},
                                                {avx512f, "avx512f"},
                                                {avx512bw, "avx512bw"},
                                                {avx512vnni, "avx512vnni"},
                                                {avx512bf16, "avx512bf16"}};
  bool first = true;
  for (const auto& [on, name] : flags) {
    if (!on) continue;
    if (!first) s += " ";
    s += name;
    first = false;
  }
  s += "]";
  return s;
}

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

CpuIsa SelectedIsa() {
  CpuIsa isa = DetectCpuFeatures().best();
  if (const char* env = std::getenv("CASCADE_CPU_ISA")) {
    CpuIsa cap = isa;
    if (std::strcmp(env, "scalar") == 0) cap = CpuIsa::kScalar;
    if (std::strcmp(env, "avx2") == 0) cap = CpuIsa::kAvx2;
    if (std::strcmp(env, "avx512") == 0) cap = CpuIsa::kAvx512;
    if (static_cast<int>(cap) < static_cast<int>(isa)) isa = cap;
  }
  return isa;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace cascade
