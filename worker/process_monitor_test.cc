#include "worker/process_monitor.h"

#include <time.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace cascade {
namespace {

// Burns `seconds` of CPU time on this thread (by the thread's own clock, not the one the
// monitor reads), however busy the machine is.
void Spin(double seconds) {
  auto thread_cpu = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
  };
  const double end = thread_cpu() + seconds;
  volatile uint64_t x = 0;
  while (thread_cpu() < end) x = x + 1;
}

TEST(ProcessMonitor, ReportsCpuTimeUtilisationAndResidentMemory) {
  ProcessMonitor m;
  const v1::ProcessStats first = m.Sample();
  // 64 MiB touched: the resident set grows by about that much.
  std::vector<char> block(64 << 20, 1);
  Spin(0.3);
  const v1::ProcessStats second = m.Sample();
  EXPECT_GE(second.cpu_seconds() - first.cpu_seconds(), 0.2);
  EXPECT_GT(second.cpu_utilization(), 0.0);
  EXPECT_LE(second.cpu_utilization(), 1.0);
  EXPECT_GE(second.resident_memory_bytes(), first.resident_memory_bytes() + (48u << 20));
  EXPECT_EQ(block[12345], 1);
}

}  // namespace
}  // namespace cascade
