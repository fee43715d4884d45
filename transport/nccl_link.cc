#include "transport/nccl_link.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "parallel/nccl_util.h"
#include "util/logging.h"
#include "util/status_macros.h"

namespace cascade {

struct NcclDataPlane::Impl {
  MpiDataPlane* mpi = nullptr;
  std::vector<int> node_ranks;    // world rank of each NCCL rank
  std::map<int, int> nccl_rank;   // world rank -> NCCL rank
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  absl::Mutex mu;                 // one transfer at a time on the stream
  float* staging = nullptr;
  size_t staging_bytes = 0;
  absl::Status broken;

  // The first error breaks the data plane for good.
  absl::Status Keep(absl::Status st) {
    if (!st.ok()) broken = st;
    return st;
  }
  absl::Status Check(cudaError_t e, const char* what) { return Keep(CudaStatus(e, kWho, what)); }
  absl::Status Check(ncclResult_t r, const char* what) { return Keep(NcclStatus(r, kWho, what)); }
  static constexpr char kWho[] = "NCCL data plane";
  absl::Status Staging(size_t bytes) {
    if (staging_bytes >= bytes) return absl::OkStatus();
    if (staging != nullptr) cudaFree(staging);
    staging = nullptr;
    staging_bytes = 0;
    CASCADE_RETURN_IF_ERROR(Check(cudaMalloc(&staging, bytes), "staging buffer"));
    staging_bytes = bytes;
    return absl::OkStatus();
  }
};

namespace {

class NcclActivationSender : public ActivationSender {
 public:
  NcclActivationSender(NcclDataPlane* plane, int to, std::string key)
      : plane_(plane), to_(to), key_(std::move(key)) {}
  absl::Status Send(StageFrame frame) override {
    if (closed_) return absl::UnavailableError(absl::StrCat("link to nccl://", to_, " is closed"));
    return plane_->SendFrame(to_, std::move(frame), key_);
  }
  void Close() override { closed_ = true; }

 private:
  NcclDataPlane* const plane_;
  const int to_;
  const std::string key_;
  std::atomic<bool> closed_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclDataPlane>> NcclDataPlane::Start(
    MpiDataPlane* mpi, Collective& node, std::vector<int> node_world_ranks, int device) {
  std::unique_ptr<NcclDataPlane> p(new NcclDataPlane());
  p->impl_ = std::make_unique<Impl>();
  Impl& m = *p->impl_;
  m.mpi = mpi;
  m.node_ranks = std::move(node_world_ranks);
  for (size_t i = 0; i < m.node_ranks.size(); ++i) m.nccl_rank[m.node_ranks[i]] = static_cast<int>(i);
  m.device = device;
  CASCADE_RETURN_IF_ERROR(m.Check(cudaSetDevice(device), "cudaSetDevice"));
  CASCADE_ASSIGN_OR_RETURN(m.comm, InitNcclComm(node, Impl::kWho));
  CASCADE_RETURN_IF_ERROR(
      m.Check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  mpi->SetTagHandler(MpiTag::kNcclHeader, [q = p.get()](int source, std::string body) {
    q->OnHeader(source, std::move(body));
  });
  return p;
}

NcclDataPlane::~NcclDataPlane() {
  if (!impl_) return;
  impl_->mpi->SetTagHandler(MpiTag::kNcclHeader, nullptr);
  cudaSetDevice(impl_->device);
  if (impl_->stream != nullptr) cudaStreamSynchronize(impl_->stream);
  if (impl_->staging != nullptr) cudaFree(impl_->staging);
  if (impl_->comm != nullptr) ncclCommDestroy(impl_->comm);
  if (impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
}

void NcclDataPlane::RegisterWithFactory() {
  TransportFactory f;
  f.activation = [this](const Address& a, const SenderOptions& o)
      -> absl::StatusOr<std::unique_ptr<ActivationSender>> {
    if (!impl_->nccl_rank.count(a.rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat(FormatAddress(a), ": not a rank of this node's NCCL data plane"));
    }
    return std::unique_ptr<ActivationSender>(
        std::make_unique<NcclActivationSender>(this, a.rank, o.link_key));
  };
  // Results are small and go to the coordinator: the MPI data plane carries them.
  f.result = [this](const Address& a,
                    const SenderOptions& o) -> absl::StatusOr<std::unique_ptr<ResultSender>> {
    return impl_->mpi->MakeResultSender(a.rank, o);
  };
  f.listen = [this](DataPlaneHandlers h) -> absl::StatusOr<std::unique_ptr<DataPlaneListener>> {
    return ListenOnTransport(Scheme::kMpi, std::move(h));  // frames arrive through the MPI plane
  };
  RegisterTransport(Scheme::kNccl, std::move(f));
}

absl::Status NcclDataPlane::SendFrame(int to, StageFrame frame, const std::string& key) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  CASCADE_RETURN_IF_ERROR(m.broken);
  // The header goes over MPI, the activations over NCCL: encode the frame without them.
  const std::vector<float> hidden = std::move(frame.hidden);
  frame.hidden.clear();
  v1::ActivationFrame wire;
  EncodeFrame(frame, key, &wire);
  const size_t bytes = hidden.size() * sizeof(float);
  if (!hidden.empty()) {
    // The shape the receiver checks the payload against.
    wire.clear_shape();
    wire.add_shape(static_cast<int64_t>(frame.slots.size()));
    wire.add_shape(static_cast<int64_t>(hidden.size() / std::max<size_t>(1, frame.slots.size())));
  }
  CASCADE_RETURN_IF_ERROR(m.mpi->SendBytes(
      to, MpiTag::kNcclHeader, std::make_shared<const std::string>(wire.SerializeAsString()),
      nullptr));
  if (bytes == 0) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(m.Staging(bytes));
  CASCADE_RETURN_IF_ERROR(m.Check(
      cudaMemcpyAsync(m.staging, hidden.data(), bytes, cudaMemcpyHostToDevice, m.stream),
      "copy to the GPU"));
  CASCADE_RETURN_IF_ERROR(m.Check(ncclSend(m.staging, hidden.size(), ncclFloat,
                                           m.nccl_rank.at(to), m.comm, m.stream),
                                  "ncclSend"));
  return m.Check(cudaStreamSynchronize(m.stream), "send");
}

void NcclDataPlane::OnHeader(int source, std::string body) {
  Impl& m = *impl_;
  v1::ActivationFrame wire;
  if (!wire.ParseFromString(body)) {
    spdlog::warn("NCCL data plane: a frame header from rank {} does not parse; dropped", source);
    return;
  }
  int64_t floats = 1;
  for (int64_t d : wire.shape()) {
    if (d < 0 || d > (int64_t{1} << 30)) floats = -1;
    if (floats >= 0) floats *= d;
  }
  if (wire.shape().empty()) floats = 0;
  // Checked before the staging buffer is sized from it.
  if (floats < 0 || floats * static_cast<int64_t>(sizeof(float)) > m.mpi->max_message_bytes() ||
      !m.nccl_rank.count(source)) {
    spdlog::warn("NCCL data plane: a frame header from rank {} claims a payload of shape {}; "
                 "dropped (the link is now out of step and stops)",
                 source, wire.shape_size());
    m.broken = absl::DataLossError("NCCL data plane: a bad frame header");
    return;
  }
  if (floats > 0) {
    absl::MutexLock lock(&m.mu);
    if (!m.broken.ok()) return;
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (!m.Staging(bytes).ok()) return;
    std::string payload(bytes, '\0');
    if (!m.Check(ncclRecv(m.staging, static_cast<size_t>(floats), ncclFloat, m.nccl_rank.at(source),
                          m.comm, m.stream),
                 "ncclRecv")
             .ok() ||
        !m.Check(cudaMemcpyAsync(payload.data(), m.staging, bytes, cudaMemcpyDeviceToHost, m.stream),
                 "copy from the GPU")
             .ok() ||
        !m.Check(cudaStreamSynchronize(m.stream), "receive").ok()) {
      spdlog::error("{}", m.broken.message());
      return;
    }
    wire.set_dtype(v1::DTYPE_F32);
    wire.set_payload(std::move(payload));
  }
  m.mpi->DeliverFrame(source, std::move(wire));
}

}  // namespace cascade
