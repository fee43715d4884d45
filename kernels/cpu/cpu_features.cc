#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace cascade {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
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
  if (avx512f && avx512bw && avx512vl && avx512dq && avx512vnni && fma && f16c) {
    return CpuIsa::kAvx512;
  }
  if (avx2 && fma && f16c) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

std::string CpuFeatures::Describe() const {
  std::string s = model_name.empty() ? "unknown CPU" : model_name;
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
