// Backend: the operations a transformer stage needs, implemented once per device kind
// (kernels/cpu for the host CPU, kernels/cuda for one CUDA device).
//
// Contract:
// - Tensor arguments (float* activations, KV pools, weights returned by UploadWeight)
//   address memory of the backend's device (host memory for the CPU backend); buffers come
//   from Allocate(). Small index arrays (token ids, positions, RoPE frequencies, KV slot
//   rows, attention query descriptors and block tables) are host memory: the backend stages them
//   onto its device itself. Tensors are dense, row-major; shapes are given in the comments as
//   (outer, ..., inner).
// - Batch invariance: the value computed for one token (one row of x) depends only on
//   that row and the weights, never on how many rows are processed together, how the work
//   is split over threads, or which other sequences share the batch. Each dot product is
//   reduced in an order fixed by its length and the weight type alone. Pipeline stages,
//   continuous batching and stream resumption rely on this.
// - A backend object is used by one stage executor thread at a time (it owns a thread
//   pool and scratch buffers); operations are synchronous.
// - Preconditions on shapes are the caller's duty (the engine validates batches before
//   calling); backends check them with CASCADE_CHECK in debug builds only for speed.
#ifndef CASCADE_KERNELS_BACKEND_H_
#define CASCADE_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tensor/tensor.h"

namespace cascade {

// One attention query: a token of one sequence attending to positions [0, n_ctx) of that
// sequence's paged KV cache (the last AttentionParams::window of them, when set).
struct AttentionQuery {
  const float* q = nullptr;         // (n_heads, head_dim)
  float* out = nullptr;             // (n_heads, head_dim)
  const int32_t* blocks = nullptr;  // the sequence's block table
  int32_t n_ctx = 0;                // positions to attend to (query position + 1)
};

// Where a KV pool (the keys, or the values) keeps its elements: (num_blocks, n_kv_heads,
// block_size, head_dim) elements of `type` (IsKvCacheType), so that a block's positions of
// one KV head lie together (attention reads them together: 8 KiB in one run for a block of
// 32 positions of head size 64 in F32, where a (block, position, head) layout spreads them
// over 32 rows n_kv_heads * head_dim apart, which the hardware prefetchers do not follow).
// A slot row is block * block_size + position (KvCache::Plan::slot_rows).
struct KvLayout {
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  TensorType type = TensorType::kF32;

  // Element offset of (slot row, KV head kvh, element 0).
  int64_t Offset(int64_t slot_row, int kvh) const {
    const int64_t block = slot_row / block_size, pos = slot_row % block_size;
    return ((block * n_kv_heads + kvh) * block_size + pos) * head_dim;
  }
  size_t element_bytes() const { return KvElementBytes(type); }
};

struct AttentionParams {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0;               // usually 1/sqrt(head_dim)
  int block_size = 0;            // tokens per KV block
  const void* k_pool = nullptr;  // kv_layout()
  const void* v_pool = nullptr;  // the same
  const AttentionQuery* queries = nullptr;
  int64_t n_queries = 0;
  // The pools' element type (IsKvCacheType): F32, or F16, which every backend converts to
  // F32 exactly before the F32 algorithm, so that the result is the F32 kernel's on the
  // converted cache.
  TensorType kv_type = TensorType::kF32;
  // Sliding window (BackendFeature::kSlidingWindow): > 0: each query attends to its last
  // `window` positions only, [max(0, n_ctx - window), n_ctx); 0: to all of [0, n_ctx).
  int32_t window = 0;
  // Score soft-cap (BackendFeature::kAttentionSoftCap): > 0: each scaled score s becomes
  // softcap * tanh(s / softcap) before the softmax; 0: none.
  float softcap = 0;

  // The first position query q attends to.
  int32_t first_position(const AttentionQuery& q) const {
    return window > 0 && q.n_ctx > window ? q.n_ctx - window : 0;
  }
  KvLayout kv_layout() const { return {n_kv_heads, head_dim, block_size, kv_type}; }
};

enum class MemoryKind { kHost, kDevice };

// Operations beyond the Llama block that some models need; a backend says which it has
// (Backend::Supports), and a stage refuses, naming the feature, a model that needs one its
// backend lacks, rather than compute it wrongly.
enum class BackendFeature {
  kSlidingWindow,     // AttentionParams::window
  kAttentionSoftCap,  // AttentionParams::softcap
  kGeluMul,           // GeluMul
  kScale,             // Scale
  kSoftCap,           // SoftCap
  // Mixture-of-experts FFN (engine/ffn.cc): the stage copies the router's logits and each
  // expert's outputs to the host (CopyToHost), routes and combines there, and runs each
  // expert's matmuls on the rows routed to it (GatherRows, MatMulShared, MatMul). Only the
  // CPU backend, whose copies are memcpy, declares it; on a GPU it is neither tested nor
  // fast (a transfer per expert and layer).
  kMixtureOfExperts,
};
inline const char* BackendFeatureName(BackendFeature f) {
  switch (f) {
    case BackendFeature::kSlidingWindow:
      return "sliding-window attention";
    case BackendFeature::kAttentionSoftCap:
      return "attention-score soft-capping";
    case BackendFeature::kGeluMul:
      return "the GELU(tanh)-gated FFN (GeluMul)";
    case BackendFeature::kScale:
      return "scaling activations (Scale)";
    case BackendFeature::kSoftCap:
      return "logit soft-capping (SoftCap)";
    case BackendFeature::kMixtureOfExperts:
      return "mixture-of-experts routing";
  }
  return "an unknown feature";
}

// An owning, move-only allocation on a backend's device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t bytes, MemoryKind kind, std::function<void(void*)> release)
      : data_(data), bytes_(bytes), kind_(kind), release_(std::move(release)) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = o.data_;
      bytes_ = o.bytes_;
      kind_ = o.kind_;
      release_ = std::move(o.release_);
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  MemoryKind kind() const { return kind_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Reset() {
    if (data_ != nullptr && release_) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::kHost;
  std::function<void(void*)> release_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int num_threads() const = 0;
  virtual MemoryKind memory_kind() const = 0;

  // Memory management. Allocate returns zeroed memory, or ResourceExhausted.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Backs all of `buffer` (from Allocate) with memory now, not when first written, or
  // returns ResourceExhausted when the machine cannot. A GPU's memory already is; the CPU
  // backend's large buffers are mapped lazily and are faulted in here.
  virtual absl::Status MakeResident(DeviceBuffer& buffer) { return absl::OkStatus(); }
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  // Copies between two places of device memory (ordered with the backend's other work).
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  // Makes a weight usable by this backend: a copy in memory the backend owns for its
  // lifetime (the CPU: in huge pages, perhaps in another row layout, the source's pages
  // released; a GPU: in device memory), or, for a CPU backend told not to copy, the view
  // unchanged (zero copy from the file mapping). Only this backend reads the result.
  virtual absl::StatusOr<TensorView> UploadWeight(const TensorView& host) = 0;
  // Waits for queued device work (no-op on the CPU).
  virtual void Synchronize() {}
  // OK while the device works; the first device error otherwise (GPU backends).
  virtual absl::Status Health() const { return absl::OkStatus(); }

  // y (n, w.rows) = x (n, w.cols) . W^T for a weight of any compute-supported type.
  virtual void MatMul(const TensorView& w, const float* x, int64_t n, float* y) = 0;
  // y[i] (n, w[i].rows) = x (n, cols) . W[i]^T for `count` weights that read the same
  // input (a layer's Q, K and V; gate and up): bit for bit MatMul of each in turn, which
  // is what this default does. A backend may run them as one (the CPU backend prepares
  // the activations once and splits all their rows over its threads in one region).
  virtual void MatMulShared(const TensorView* const* w, int count, const float* x, int64_t n,
                            float* const* y) {
    for (int i = 0; i < count; ++i) MatMul(*w[i], x, n, y[i]);
  }

  // out (n, w.cols) = rows ids[0..n) of W, dequantized to F32. ids must be < w.rows.
  virtual void GetRows(const TensorView& w, const int32_t* ids, int64_t n, float* out) = 0;

  // out (n, dim) = x / sqrt(mean(x^2) + eps) * weight. out may alias x.
  virtual void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* out) = 0;

  // Rotates x (n, n_heads, head_dim) in place by positions pos[0..n): the first rope_dim
  // dimensions of each head, paired per `layout`, with freq[i] the frequency of pair i.
  virtual void Rope(float* x, const int32_t* pos, int64_t n, int n_heads, int head_dim,
                    int rope_dim, RopeLayout layout, const float* freq) = 0;

  // out[i] = silu(gate[i]) * up[i] for i in [0, count). out may alias gate.
  virtual void SiluMul(const float* gate, const float* up, int64_t count, float* out) = 0;

  // Whether this backend implements `f` (the operations below, the attention options).
  virtual bool Supports(BackendFeature f) const = 0;
  // out[i] = gelu_tanh(gate[i]) * up[i] for i in [0, count), gelu_tanh(x) = 0.5 x (1 +
  // tanh(sqrt(2/pi) (x + 0.044715 x^3))). out may alias gate.
  virtual void GeluMul(const float* gate, const float* up, int64_t count, float* out) = 0;
  // x[i] *= factor for i in [0, count).
  virtual void Scale(float* x, int64_t count, float factor) = 0;
  // x[i] = cap * tanh(x[i] / cap) for i in [0, count).
  virtual void SoftCap(float* x, int64_t count, float cap) = 0;

  // y[i] += x[i] for i in [0, count).
  virtual void Add(const float* x, int64_t count, float* y) = 0;

  // x (n, dim) += bias (dim).
  virtual void AddBias(const float* bias, int64_t n, int64_t dim, float* x) = 0;

  // Writes rows k[i], v[i] (n, n_kv_heads * head_dim) to slot row slot_rows[i] of the KV
  // pools, laid out as `layout` says (F16: each element rounded to nearest even, as
  // FloatToFp16).
  virtual void StoreKv(const float* k, const float* v, const int64_t* slot_rows, int64_t n,
                       const KvLayout& layout, void* k_pool, void* v_pool) = 0;

  // dst (n, dim) = rows[i] of src (rows, dim), i.e. a gather of activation rows.
  virtual void GatherRows(const float* src, const int64_t* rows, int64_t n, int64_t dim,
                          float* dst) = 0;

  // Causal attention of each query over its sequence's paged KV cache.
  virtual void Attention(const AttentionParams& p) = 0;

  // In-place softmax of each row of x (n, dim).
  virtual void Softmax(float* x, int64_t n, int64_t dim) = 0;
};

}  // namespace cascade

#endif  // CASCADE_KERNELS_BACKEND_H_
