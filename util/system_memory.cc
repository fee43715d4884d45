#include "util/system_memory.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace cascade {

uint64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

std::string MachineId() {
  for (const char* path : {"/proc/sys/kernel/random/boot_id", "/etc/machine-id"}) {
    std::ifstream in(path);
    std::string id;
    if (in >> id && !id.empty()) return id;
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace cascade
