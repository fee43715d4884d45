// Collective: the communication of a tensor-parallel group, one object per rank. A stage
// split over T ranks (engine/stage.h) calls it after each row-parallel matmul (all-reduce),
// for the output head split by vocabulary (all-gather), and the group's leader broadcasts
// each step's input to the others (worker/tp_group.h).
//
// Implementations: InProcessGroup (threads of one process, parallel/inproc_collective.h),
// MpiCollective (CPU processes, parallel/mpi_collective.h), NcclCollective (GPUs,
// parallel/nccl_collective.h, built with CUDA).
//
// Contract:
// - Every rank of a group calls the same operations in the same order with the same sizes
//   (the ranks run in lock-step). Nothing else synchronizes them: there is no barrier in
//   the steady state.
// - Buffers are memory of memory_kind(): host memory for the in-process and MPI groups,
//   device memory of the rank's GPU for NCCL.
// - AllReduceSum is deterministic and batch-invariant: element i of the result is
//   ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order, whatever the count. It is built as an
//   all-gather followed by that fixed-order sum, never as the library's own reduction,
//   whose order may change with the message size (and so with the batch).
// - An operation returns once this rank's part is complete. When the group is broken (a
//   rank gone, Abort() called) it returns an error naming what happened, and so does
//   every later operation.
// - One thread at a time per object; different objects (ranks) run on different threads
//   or processes.
#ifndef CASCADE_PARALLEL_COLLECTIVE_H_
#define CASCADE_PARALLEL_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace cascade {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual MemoryKind memory_kind() const = 0;
  // What the group is, for messages ("MPI ranks 2-3", "in-process group of 4").
  virtual std::string name() const = 0;

  // recv (size() * bytes) = the `bytes` of every rank's `send`, in rank order.
  virtual absl::Status AllGather(const void* send, size_t bytes, void* recv) = 0;
  // data (bytes) on every rank = data on `root`.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;
  // data (count) = the sum of every rank's data, in rank order (see the contract).
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
};

// The fixed-order sum of AllReduceSum on the host: out[i] = ((parts[0][i] + parts[1][i]) +
// ...) for `n` parts of `count` floats laid out one after another. out may alias parts[0..count).
void SumPartsInRankOrder(const float* parts, int n, int64_t count, float* out);

// AllReduceSum for host-memory groups: AllGather into `scratch`, then the fixed-order sum.
absl::Status HostAllReduceSum(Collective& c, float* data, int64_t count,
                              std::vector<float>* scratch);

// Host-memory helpers for groups of any kind of memory_kind() == kHost.
// Broadcasts a string of any length from `root` (its length first).
absl::Status BroadcastString(Collective& c, std::string* s, int root);
// Every rank's string, in rank order.
absl::StatusOr<std::vector<std::string>> AllGatherStrings(Collective& c, const std::string& mine);

}  // namespace cascade

#endif  // CASCADE_PARALLEL_COLLECTIVE_H_
