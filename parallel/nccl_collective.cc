#include "parallel/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "parallel/nccl_sum.h"
#include "util/status_macros.h"

namespace cascade {

struct NcclCollective::Impl {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;  // all-gather of the all-reduce, grown on demand
  size_t scratch_bytes = 0;
  absl::Status broken;

  absl::Status Cuda(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return absl::OkStatus();
    broken = absl::InternalError(absl::StrCat(what, ": CUDA error: ", cudaGetErrorString(e)));
    return broken;
  }
  absl::Status Nccl(ncclResult_t r, const std::string& what) {
    if (r == ncclSuccess) return absl::OkStatus();
    broken = absl::UnavailableError(absl::StrCat(what, ": NCCL error: ", ncclGetErrorString(r)));
    return broken;
  }
  absl::Status Finish(const std::string& what) { return Cuda(cudaStreamSynchronize(stream), what); }
};

absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(Collective& control,
                                                                       int device,
                                                                       std::string name) {
  std::unique_ptr<NcclCollective> c(new NcclCollective());
  c->impl_ = std::make_unique<Impl>();
  c->rank_ = control.rank();
  c->size_ = control.size();
  c->name_ = std::move(name);
  Impl& m = *c->impl_;
  m.device = device;
  CASCADE_RETURN_IF_ERROR(m.Cuda(cudaSetDevice(device), c->name_ + ": cudaSetDevice"));
  // The unique id: drawn by rank 0, sent over the host-memory group.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (c->rank_ == 0) CASCADE_RETURN_IF_ERROR(m.Nccl(ncclGetUniqueId(&id), c->name_));
  std::string bytes(reinterpret_cast<const char*>(&id), sizeof(id));
  CASCADE_RETURN_IF_ERROR(BroadcastString(control, &bytes, 0));
  if (bytes.size() != sizeof(id)) {
    return absl::DataLossError(absl::StrCat(c->name_, ": the NCCL id arrived with ", bytes.size(),
                                            " bytes, not ", sizeof(id)));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  CASCADE_RETURN_IF_ERROR(m.Nccl(ncclCommInitRank(&m.comm, c->size_, id, c->rank_),
                                 c->name_ + ": ncclCommInitRank"));
  CASCADE_RETURN_IF_ERROR(m.Cuda(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking),
                                 c->name_ + ": cudaStreamCreate"));
  return c;
}

NcclCollective::~NcclCollective() {
  if (!impl_) return;
  cudaSetDevice(impl_->device);
  if (impl_->stream != nullptr) cudaStreamSynchronize(impl_->stream);
  if (impl_->scratch != nullptr) cudaFree(impl_->scratch);
  if (impl_->comm != nullptr) ncclCommDestroy(impl_->comm);
  if (impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
}

absl::Status NcclCollective::AllGather(const void* send, size_t bytes, void* recv) {
  Impl& m = *impl_;
  CASCADE_RETURN_IF_ERROR(m.broken);
  CASCADE_RETURN_IF_ERROR(
      m.Nccl(ncclAllGather(send, recv, bytes, ncclChar, m.comm, m.stream), name_ + ": all-gather"));
  return m.Finish(name_ + ": all-gather");
}

absl::Status NcclCollective::Broadcast(void* data, size_t bytes, int root) {
  Impl& m = *impl_;
  CASCADE_RETURN_IF_ERROR(m.broken);
  CASCADE_RETURN_IF_ERROR(m.Nccl(ncclBroadcast(data, data, bytes, ncclChar, root, m.comm, m.stream),
                                 name_ + ": broadcast"));
  return m.Finish(name_ + ": broadcast");
}

absl::Status NcclCollective::AllReduceSum(float* data, int64_t count) {
  Impl& m = *impl_;
  CASCADE_RETURN_IF_ERROR(m.broken);
  if (size_ == 1 || count <= 0) return absl::OkStatus();
  const size_t need = static_cast<size_t>(count) * sizeof(float) * static_cast<size_t>(size_);
  if (m.scratch_bytes < need) {
    if (m.scratch != nullptr) cudaFree(m.scratch);
    m.scratch = nullptr;
    m.scratch_bytes = 0;
    CASCADE_RETURN_IF_ERROR(m.Cuda(cudaMalloc(&m.scratch, need), name_ + ": scratch"));
    m.scratch_bytes = need;
  }
  CASCADE_RETURN_IF_ERROR(m.Nccl(ncclAllGather(data, m.scratch, static_cast<size_t>(count),
                                               ncclFloat, m.comm, m.stream),
                                 name_ + ": all-reduce (all-gather)"));
  CASCADE_RETURN_IF_ERROR(m.Cuda(nccl::SumPartsInRankOrder(m.scratch, size_, count, data, m.stream),
                                 name_ + ": all-reduce (sum)"));
  return m.Finish(name_ + ": all-reduce");
}

}  // namespace cascade
