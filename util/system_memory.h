// The machine's memory as the kernel reports it.
//
// Contract: AvailableMemoryBytes is /proc/meminfo's MemAvailable (what can be allocated
// without swapping: free memory plus reclaimable caches), 0 when it cannot be read.
// Thread-safe.
#ifndef CASCADE_UTIL_SYSTEM_MEMORY_H_
#define CASCADE_UTIL_SYSTEM_MEMORY_H_

#include <cstdint>

namespace cascade {

uint64_t AvailableMemoryBytes();

}  // namespace cascade

#endif  // CASCADE_UTIL_SYSTEM_MEMORY_H_
