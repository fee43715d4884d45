#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_kernels.h"

namespace cascade {

struct CudaBackend::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::string device_name;
  mutable std::mutex mu;
  cudaError_t first_error = cudaSuccess;  // guarded by mu
  const char* refused = nullptr;          // guarded by mu: a feature called but not implemented
  std::vector<DeviceBuffer> weights;      // uploaded weights, owned
  DeviceBuffer staging;                   // small index arrays copied from the host

  bool Check(cudaError_t e) {
    if (e == cudaSuccess) return true;
    std::lock_guard<std::mutex> lock(mu);
    if (first_error == cudaSuccess) first_error = e;
    return false;
  }
  bool Failed() const {
    std::lock_guard<std::mutex> lock(mu);
    return first_error != cudaSuccess || refused != nullptr;
  }
  void Refuse(BackendFeature f) {
    std::lock_guard<std::mutex> lock(mu);
    if (refused == nullptr) refused = BackendFeatureName(f);
  }
  // Copies a small host array into device staging memory at byte `offset` and returns its
  // device address. The copy completes before returning, so the host array may change.
  template <typename T>
  const T* Stage(const T* host, int64_t count, size_t* offset) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    const size_t at = (*offset + 255) / 256 * 256;
    if (at + bytes > staging.size()) {
      Check(cudaStreamSynchronize(stream));  // older staged arrays are no longer needed
      void* p = nullptr;
      const size_t size = std::max<size_t>(2 * (at + bytes), 1 << 20);
      if (!Check(cudaMalloc(&p, size))) return nullptr;
      staging = DeviceBuffer(p, size, MemoryKind::kDevice, [](void* q) { cudaFree(q); });
    }
    auto* dst = static_cast<uint8_t*>(staging.data()) + at;
    Check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream));
    Check(cudaStreamSynchronize(stream));
    *offset = at + bytes;
    return reinterpret_cast<const T*>(dst);
  }
};

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaBackend::~CudaBackend() {
  if (impl_ && impl_->stream != nullptr) {
    cudaStreamSynchronize(impl_->stream);
    impl_->weights.clear();
    impl_->staging = DeviceBuffer();
    cudaStreamDestroy(impl_->stream);
  }
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& o) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", cudaGetErrorString(e)));
  }
  if (o.device < 0 || o.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", o.device, " does not exist (", count, " present)"));
  }
  auto impl = std::make_unique<Impl>();
  impl->device = o.device;
  if ((e = cudaSetDevice(o.device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", o.device, ": ", cudaGetErrorString(e)));
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, o.device) == cudaSuccess) impl->device_name = prop.name;
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

std::string CudaBackend::name() const {
  return absl::StrCat("cuda(", impl_->device, ": ", impl_->device_name, ")");
}

absl::Status CudaBackend::Health() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->refused != nullptr) {
    return absl::UnimplementedError(absl::StrCat("CUDA device ", impl_->device, ": ",
                                                 impl_->refused, " is not implemented on CUDA"));
  }
  if (impl_->first_error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("CUDA device ", impl_->device, ": ", cudaGetErrorString(impl_->first_error)));
}

absl::StatusOr<DeviceBuffer> CudaBackend::Allocate(size_t bytes) {
  void* p = nullptr;
  const size_t size = std::max<size_t>(bytes, 256);
  cudaError_t e = cudaMalloc(&p, size);
  if (e != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("CUDA device ", impl_->device,
                                                     ": cannot allocate ", bytes,
                                                     " bytes: ", cudaGetErrorString(e)));
  }
  impl_->Check(cudaMemsetAsync(p, 0, size, impl_->stream));
  return DeviceBuffer(p, bytes, MemoryKind::kDevice, [](void* q) { cudaFree(q); });
}

void CudaBackend::CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0 || impl_->Failed()) return;
  impl_->Check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, impl_->stream));
  impl_->Check(cudaStreamSynchronize(impl_->stream));
}

void CudaBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0 || impl_->Failed()) return;
  impl_->Check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream));
  impl_->Check(cudaStreamSynchronize(impl_->stream));
}

void CudaBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src || impl_->Failed()) return;
  impl_->Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl_->stream));
}

void CudaBackend::Synchronize() { impl_->Check(cudaStreamSynchronize(impl_->stream)); }

absl::StatusOr<TensorView> CudaBackend::UploadWeight(const TensorView& host) {
  if (!cuda::SupportsWeightType(static_cast<uint32_t>(host.type))) {
    return absl::UnimplementedError(
        absl::StrCat("CUDA device ", impl_->device, ": weight '", host.name, "' has type ",
                     TensorTypeName(host.type),
                     ", which the CUDA kernels do not implement (run this model on the CPU)"));
  }
  auto buf = Allocate(host.nbytes);
  if (!buf.ok()) return buf.status();
  CopyToDevice(buf->data(), host.data, host.nbytes);
  if (auto st = Health(); !st.ok()) return st;
  TensorView dev = host;
  dev.data = buf->as<uint8_t>();
  impl_->weights.push_back(std::move(*buf));
  return dev;
}

void CudaBackend::MatMul(const TensorView& w, const float* x, int64_t n, float* y) {
  if (n == 0 || impl_->Failed()) return;
  impl_->Check(cuda::MatMul(static_cast<uint32_t>(w.type), w.data, w.row_bytes(), w.cols(),
                            w.rows(), x, n, y, impl_->stream));
}

void CudaBackend::GetRows(const TensorView& w, const int32_t* ids, int64_t n, float* out) {
  if (n == 0 || impl_->Failed()) return;
  size_t off = 0;
  const int32_t* d_ids = impl_->Stage(ids, n, &off);
  if (d_ids == nullptr) return;
  impl_->Check(cuda::GetRows(static_cast<uint32_t>(w.type), w.data, w.row_bytes(), w.cols(), d_ids,
                             n, out, impl_->stream));
}

void CudaBackend::RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                          float* out) {
  if (n == 0 || impl_->Failed()) return;
  impl_->Check(cuda::RmsNorm(x, weight, n, dim, eps, out, impl_->stream));
}

void CudaBackend::Rope(float* x, const int32_t* pos, int64_t n, int n_heads, int head_dim,
                       int rope_dim, RopeLayout layout, const float* freq) {
  if (n == 0 || impl_->Failed()) return;
  size_t off = 0;
  const int32_t* d_pos = impl_->Stage(pos, n, &off);
  const float* d_freq = impl_->Stage(freq, std::max(1, rope_dim / 2), &off);
  if (d_pos == nullptr || d_freq == nullptr) return;
  impl_->Check(cuda::Rope(x, d_pos, n, n_heads, head_dim, rope_dim, layout == RopeLayout::kHalves,
                          d_freq, impl_->stream));
}

void CudaBackend::SiluMul(const float* gate, const float* up, int64_t count, float* out) {
  if (count == 0 || impl_->Failed()) return;
  impl_->Check(cuda::SiluMul(gate, up, count, out, impl_->stream));
}

void CudaBackend::GeluMul(const float*, const float*, int64_t, float*) {
  impl_->Refuse(BackendFeature::kGeluMul);
}

void CudaBackend::Scale(float*, int64_t, float) { impl_->Refuse(BackendFeature::kScale); }

void CudaBackend::SoftCap(float*, int64_t, float) { impl_->Refuse(BackendFeature::kSoftCap); }

void CudaBackend::Add(const float* x, int64_t count, float* y) {
  if (count == 0 || impl_->Failed()) return;
  impl_->Check(cuda::Add(x, count, y, impl_->stream));
}

void CudaBackend::AddBias(const float* bias, int64_t n, int64_t dim, float* x) {
  if (n == 0 || impl_->Failed()) return;
  impl_->Check(cuda::AddBias(bias, n, dim, x, impl_->stream));
}

void CudaBackend::StoreKv(const float* k, const float* v, const int64_t* slot_rows, int64_t n,
                          const KvLayout& layout, void* k_pool, void* v_pool) {
  if (n == 0 || impl_->Failed()) return;
  size_t off = 0;
  const int64_t* d_rows = impl_->Stage(slot_rows, n, &off);
  if (d_rows == nullptr) return;
  impl_->Check(cuda::StoreKv(k, v, d_rows, n, layout.n_kv_heads, layout.head_dim, layout.block_size,
                             layout.type == TensorType::kF16, k_pool, v_pool, impl_->stream));
}

void CudaBackend::GatherRows(const float* src, const int64_t* rows, int64_t n, int64_t dim,
                             float* dst) {
  if (n == 0 || impl_->Failed()) return;
  size_t off = 0;
  const int64_t* d_rows = impl_->Stage(rows, n, &off);
  if (d_rows == nullptr) return;
  impl_->Check(cuda::GatherRows(src, d_rows, n, dim, dst, impl_->stream));
}

void CudaBackend::Attention(const AttentionParams& p) {
  if (p.window > 0) impl_->Refuse(BackendFeature::kSlidingWindow);
  if (p.softcap > 0) impl_->Refuse(BackendFeature::kAttentionSoftCap);
  if (p.n_queries == 0 || impl_->Failed()) return;
  // Flatten the queries' block tables for the device.
  std::vector<cuda::DeviceQuery> queries(p.n_queries);
  std::vector<int32_t> blocks;
  for (int64_t i = 0; i < p.n_queries; ++i) {
    const AttentionQuery& q = p.queries[i];
    queries[i] = {q.q, q.out, static_cast<int64_t>(blocks.size()), q.n_ctx};
    const int32_t nb = (q.n_ctx + p.block_size - 1) / p.block_size;
    blocks.insert(blocks.end(), q.blocks, q.blocks + nb);
  }
  size_t off = 0;
  const cuda::DeviceQuery* d_queries = impl_->Stage(queries.data(), p.n_queries, &off);
  const int32_t* d_blocks = impl_->Stage(blocks.data(), static_cast<int64_t>(blocks.size()), &off);
  if (d_queries == nullptr || d_blocks == nullptr) return;
  impl_->Check(cuda::Attention(d_queries, p.n_queries, d_blocks, p.n_heads, p.n_kv_heads,
                               p.head_dim, p.scale, p.block_size, p.kv_type == TensorType::kF16,
                               p.k_pool, p.v_pool, impl_->stream));
}

void CudaBackend::Softmax(float* x, int64_t n, int64_t dim) {
  if (n == 0 || impl_->Failed()) return;
  impl_->Check(cuda::Softmax(x, n, dim, impl_->stream));
}

}  // namespace cascade
