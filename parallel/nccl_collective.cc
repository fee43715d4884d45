#include "parallel/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include "parallel/nccl_sum.h"
#include "parallel/nccl_util.h"
#include "util/status_macros.h"

namespace cascade {

struct NcclCollective::Impl {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;  // all-gather of the all-reduce, grown on demand
  size_t scratch_bytes = 0;
  absl::Status broken;

  std::string name;

  // The first error breaks the group for good.
  absl::Status Keep(absl::Status st) {
    if (!st.ok()) broken = st;
    return st;
  }
  absl::Status Cuda(cudaError_t e, absl::string_view what) { return Keep(CudaStatus(e, name, what)); }
  absl::Status Nccl(ncclResult_t r, absl::string_view what) { return Keep(NcclStatus(r, name, what)); }
  absl::Status Finish(absl::string_view what) { return Cuda(cudaStreamSynchronize(stream), what); }
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
  m.name = c->name_;
  CASCADE_RETURN_IF_ERROR(m.Cuda(cudaSetDevice(device), "cudaSetDevice"));
  CASCADE_ASSIGN_OR_RETURN(m.comm, InitNcclComm(control, c->name_));
  CASCADE_RETURN_IF_ERROR(
      m.Cuda(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate"));
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
      m.Nccl(ncclAllGather(send, recv, bytes, ncclChar, m.comm, m.stream), "all-gather"));
  return m.Finish("all-gather");
}

absl::Status NcclCollective::Broadcast(void* data, size_t bytes, int root) {
  Impl& m = *impl_;
  CASCADE_RETURN_IF_ERROR(m.broken);
  CASCADE_RETURN_IF_ERROR(m.Nccl(ncclBroadcast(data, data, bytes, ncclChar, root, m.comm, m.stream),
                                 "broadcast"));
  return m.Finish("broadcast");
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
    CASCADE_RETURN_IF_ERROR(m.Cuda(cudaMalloc(&m.scratch, need), "scratch"));
    m.scratch_bytes = need;
  }
  CASCADE_RETURN_IF_ERROR(m.Nccl(ncclAllGather(data, m.scratch, static_cast<size_t>(count),
                                               ncclFloat, m.comm, m.stream),
                                 "all-reduce (all-gather)"));
  CASCADE_RETURN_IF_ERROR(m.Cuda(nccl::SumPartsInRankOrder(m.scratch, size_, count, data, m.stream),
                                 "all-reduce (sum)"));
  return m.Finish("all-reduce");
}

}  // namespace cascade
