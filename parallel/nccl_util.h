// NCCL glue shared by the NCCL collective (parallel/nccl_collective.h) and the NCCL data
// plane (transport/nccl_link.h): CUDA and NCCL results as absl::Status, and communicator
// set-up over a host-memory group.
//
// Contract: CudaStatus / NcclStatus build nothing on success; on failure the status names
// `who` and `what` (CUDA errors: Internal; NCCL errors: Unavailable, a peer may be gone).
// InitNcclComm is collective over `control`: every rank calls it with the same group, on
// the CUDA device it has set; the communicator is the caller's to destroy
// (ncclCommDestroy). Thread-compatible.
#ifndef CASCADE_PARALLEL_NCCL_UTIL_H_
#define CASCADE_PARALLEL_NCCL_UTIL_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "parallel/collective.h"

namespace cascade {

absl::Status CudaStatus(cudaError_t e, absl::string_view who, absl::string_view what);
absl::Status NcclStatus(ncclResult_t r, absl::string_view who, absl::string_view what);

// A communicator of control.size() ranks, rank control.rank() of it: the unique id drawn
// by rank 0 and broadcast over `control`.
absl::StatusOr<ncclComm_t> InitNcclComm(Collective& control, absl::string_view who);

}  // namespace cascade

#endif  // CASCADE_PARALLEL_NCCL_UTIL_H_
