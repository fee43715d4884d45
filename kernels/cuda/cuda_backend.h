// CudaBackend: the Backend on one CUDA device (kernels in cuda_kernels.cu).
//
// Contract: see kernels/backend.h. All work is queued on one CUDA stream owned by the
// backend; CopyToHost waits for it. Weights are copied to device memory by UploadWeight and
// owned by the backend. Every matmul output element is reduced by one warp in a fixed
// order (lane-strided partial sums, then a fixed shuffle tree), so results are
// batch-invariant as on the CPU. CUDA errors are sticky: the first one is kept and
// returned by Health(), and later operations become no-ops.
#ifndef CASCADE_KERNELS_CUDA_CUDA_BACKEND_H_
#define CASCADE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/gpu.h"

namespace cascade {

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override;
  int num_threads() const override { return 1; }
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  absl::Status Health() const override;

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override;
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  absl::StatusOr<TensorView> UploadWeight(const TensorView& host) override;
  void Synchronize() override;

  void MatMul(const TensorView& w, const float* x, int64_t n, float* y) override;
  void GetRows(const TensorView& w, const int32_t* ids, int64_t n, float* out) override;
  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* out) override;
  void Rope(float* x, const int32_t* pos, int64_t n, int n_heads, int head_dim, int rope_dim,
            RopeLayout layout, const float* freq) override;
  void SiluMul(const float* gate, const float* up, int64_t count, float* out) override;
  // None of BackendFeature's operations is implemented here yet: Supports says no, and
  // calling one leaves an Unimplemented error naming it (Health) instead of a result.
  bool Supports(BackendFeature) const override { return false; }
  void GeluMul(const float* gate, const float* up, int64_t count, float* out) override;
  void Scale(float* x, int64_t count, float factor) override;
  void SoftCap(float* x, int64_t count, float cap) override;
  void Add(const float* x, int64_t count, float* y) override;
  void AddBias(const float* bias, int64_t n, int64_t dim, float* x) override;
  void StoreKv(const float* k, const float* v, const int64_t* slot_rows, int64_t n,
               const KvLayout& layout, void* k_pool, void* v_pool) override;
  void GatherRows(const float* src, const int64_t* rows, int64_t n, int64_t dim,
                  float* dst) override;
  void Attention(const AttentionParams& p) override;
  void Softmax(float* x, int64_t n, int64_t dim) override;

 private:
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cascade

#endif  // CASCADE_KERNELS_CUDA_CUDA_BACKEND_H_
