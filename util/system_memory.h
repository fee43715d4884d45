// The machine's memory as the kernel reports it, and which machine it is.
//
// Contract: AvailableMemoryBytes is /proc/meminfo's MemAvailable (what can be allocated
// without swapping: free memory plus reclaimable caches), 0 when it cannot be read.
// MachineId names this boot of this machine: /proc/sys/kernel/random/boot_id (the same in
// every container and network namespace on it, so processes that share its memory share
// the id), else /etc/machine-id, else the host name. Thread-safe.
#ifndef CASCADE_UTIL_SYSTEM_MEMORY_H_
#define CASCADE_UTIL_SYSTEM_MEMORY_H_

#include <cstdint>
#include <string>

namespace cascade {

uint64_t AvailableMemoryBytes();
std::string MachineId();

}  // namespace cascade

#endif  // CASCADE_UTIL_SYSTEM_MEMORY_H_
