// NcclCollective: a tensor-parallel group of GPUs (one rank per GPU of a node) over NCCL.
// Built only with CUDA and NCCL (CASCADE_WITH_NCCL); compiled in CI, run by
// tests/gpu/device-check.sh on a machine with a GPU.
//
// Contract: as parallel/collective.h, on device memory of the rank's GPU. Create makes the
// NCCL communicator: rank 0 of `control` (a host-memory group over the same ranks: MPI,
// or in-process threads) draws the unique id and broadcasts it. Every operation is
// queued on the collective's own CUDA stream and waited for before it returns, so its
// inputs must be complete (the stage synchronizes its backend first) and its outputs are
// ready for any stream afterwards. AllReduceSum is ncclAllGather plus a fixed-order sum
// kernel (never ncclAllReduce, whose order may change with the size). NCCL and CUDA errors
// break the group: that call and every later one return them.
#ifndef CASCADE_PARALLEL_NCCL_COLLECTIVE_H_
#define CASCADE_PARALLEL_NCCL_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "parallel/collective.h"

namespace cascade {

class NcclCollective : public Collective {
 public:
  // `device`: this rank's CUDA ordinal. `control` must span the same ranks in the same order.
  static absl::StatusOr<std::unique_ptr<NcclCollective>> Create(Collective& control, int device,
                                                               std::string name);
  ~NcclCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  std::string name() const override { return name_; }
  absl::Status AllGather(const void* send, size_t bytes, void* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status AllReduceSum(float* data, int64_t count) override;

 private:
  struct Impl;
  NcclCollective() = default;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  std::string name_;
};

}  // namespace cascade

#endif  // CASCADE_PARALLEL_NCCL_COLLECTIVE_H_
