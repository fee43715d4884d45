#include "worker/process_monitor.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace cascade {

double ProcessCpuSeconds() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

uint64_t ProcessResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int read = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (read != 2) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(page > 0 ? page : 4096);
}

ProcessMonitor::ProcessMonitor() : last_wall_(Clock::now()), last_cpu_s_(ProcessCpuSeconds()) {}

v1::ProcessStats ProcessMonitor::Sample() {
  const double cpu = ProcessCpuSeconds();
  const Clock::time_point now = Clock::now();
  v1::ProcessStats out;
  out.set_cpu_seconds(cpu);
  out.set_resident_memory_bytes(ProcessResidentBytes());
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  absl::MutexLock lock(&mu_);
  const double wall = std::chrono::duration<double>(now - last_wall_).count();
  if (wall > 0) {
    out.set_cpu_utilization(std::clamp((cpu - last_cpu_s_) / (wall * cores), 0.0, 1.0));
  }
  last_wall_ = now;
  last_cpu_s_ = cpu;
  return out;
}

}  // namespace cascade
