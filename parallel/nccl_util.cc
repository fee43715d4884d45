#include "parallel/nccl_util.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace cascade {

absl::Status CudaStatus(cudaError_t e, absl::string_view who, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(who, ": ", what, ": CUDA error: ", cudaGetErrorString(e)));
}

absl::Status NcclStatus(ncclResult_t r, absl::string_view who, absl::string_view what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(who, ": ", what, ": NCCL error: ", ncclGetErrorString(r)));
}

absl::StatusOr<ncclComm_t> InitNcclComm(Collective& control, absl::string_view who) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  absl::Status drawn;
  if (control.rank() == 0) drawn = NcclStatus(ncclGetUniqueId(&id), who, "ncclGetUniqueId");
  // Rank 0 broadcasts even when it has no id (then nothing), so no rank waits for it.
  std::string bytes = drawn.ok() ? std::string(reinterpret_cast<const char*>(&id), sizeof(id))
                                 : std::string();
  CASCADE_RETURN_IF_ERROR(BroadcastString(control, &bytes, 0));
  CASCADE_RETURN_IF_ERROR(drawn);
  if (bytes.size() != sizeof(id)) {
    return absl::DataLossError(absl::StrCat(who, ": the NCCL id arrived with ", bytes.size(),
                                            " bytes, not ", sizeof(id)));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  CASCADE_RETURN_IF_ERROR(
      NcclStatus(ncclCommInitRank(&comm, control.size(), id, control.rank()), who, "ncclCommInitRank"));
  return comm;
}

}  // namespace cascade
