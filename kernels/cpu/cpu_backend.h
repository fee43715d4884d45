// CpuBackend: the Backend on the host CPU, multi-threaded, with SIMD kernels chosen at run
// time (AVX2/FMA/F16C when present, a portable path otherwise).
//
// Contract: see kernels/backend.h. Owns a ThreadPool of `threads` threads (the caller's
// thread included), grow-only scratch buffers and the weights UploadWeight copied (freed
// with the backend), so one CpuBackend serves one stage executor thread at a time. Work
// is split by output rows (matmul: chunks claimed dynamically; for float prefill the
// threads first pack the activations once together) or by rows / (query, KV head) (other
// ops), never inside a dot product, which keeps results independent of the thread count.
#ifndef CASCADE_KERNELS_CPU_CPU_BACKEND_H_
#define CASCADE_KERNELS_CPU_CPU_BACKEND_H_

#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/weight_arena.h"
#include "util/thread_pool.h"

namespace cascade {

struct CpuBackendOptions {
  int threads = 1;
  // Quantize activations to 8 bits for Q4_0/Q8_0/K-quant weights (fast integer dot
  // products, logits within ~5e-2 of exact). Off: dequantize weights and compute in F32.
  bool quantized_activations = true;
  // Cap on the SIMD level; the CPU's best level is used when it is lower.
  CpuIsa max_isa = CpuIsa::kAvx512;
  // UploadWeight copies each weight into memory the backend owns, in 2 MiB transparent huge
  // pages where the kernel gives them, small weights packed together (weight_arena.h;
  // decode streams the weights: faster than from 4 KiB pages), and releases the source's
  // pages (so the weights are in memory once). With quantized activations, Q8_0 / Q4_0 /
  // Q4_K weights are regrouped 16 rows at a time on the way (kernels/cpu/row_groups.h)
  // where the ISA has a kernel for that layout (KernelTable::groups: AVX-512 VNNI all
  // three, AVX2 Q4_0 and Q4_K).
  // Same results bit for bit. Off, or for the weights that no longer fit in the memory
  // available (less 1 GiB or 5%): used in place (zero copy).
  bool copy_weights = true;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);
  ~CpuBackend() override;

  std::string name() const override;
  int num_threads() const override { return pool_.num_threads(); }
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  absl::Status MakeResident(DeviceBuffer& buffer) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override;
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  // A copy of the weight (CpuBackendOptions::copy_weights), owned by this backend until it is
  // destroyed; or, with copy_weights off, the view unchanged (zero copy).
  absl::StatusOr<TensorView> UploadWeight(const TensorView& host) override;
  void StoreKv(const float* k, const float* v, const int64_t* slot_rows, int64_t n,
               const KvLayout& layout, void* k_pool, void* v_pool) override;
  void GatherRows(const float* src, const int64_t* rows, int64_t n, int64_t dim,
                  float* dst) override;
  CpuIsa isa() const { return isa_; }

  void MatMul(const TensorView& w, const float* x, int64_t n, float* y) override;
  // Weights of one type, layout and row length (at most kMaxShared of them) in one
  // parallel region, the activations prepared once; others one after another.
  void MatMulShared(const TensorView* const* w, int count, const float* x, int64_t n,
                    float* const* y) override;
  static constexpr int kMaxShared = 4;
  void GetRows(const TensorView& w, const int32_t* ids, int64_t n, float* out) override;
  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* out) override;
  void Rope(float* x, const int32_t* pos, int64_t n, int n_heads, int head_dim, int rope_dim,
            RopeLayout layout, const float* freq) override;
  void SiluMul(const float* gate, const float* up, int64_t count, float* out) override;
  bool Supports(BackendFeature) const override { return true; }
  void GeluMul(const float* gate, const float* up, int64_t count, float* out) override;
  void Scale(float* x, int64_t count, float factor) override;
  void SoftCap(float* x, int64_t count, float cap) override;
  void Add(const float* x, int64_t count, float* y) override;
  void AddBias(const float* bias, int64_t n, int64_t dim, float* x) override;
  void Attention(const AttentionParams& p) override;
  void Softmax(float* x, int64_t n, int64_t dim) override;

 private:
  CpuBackendOptions options_;
  CpuIsa isa_;
  ThreadPool pool_;
  std::vector<uint8_t> act_scratch_;  // prepared activations
  std::vector<int64_t> attention_tiles_;  // Attention's tile starts; capacity kept
  // Rope's (cos, sin) of every position below rope_positions_ for the frequencies in
  // rope_freq_ (half of them per position): each is computed once, not once per call (a
  // step's two calls per layer, every layer) (RopeAngles).
  std::vector<float> rope_freq_;
  std::vector<float> rope_cs_;
  int64_t rope_positions_ = 0;
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  struct Scratch {
    std::unique_ptr<float[], FreeDeleter> data;  // 64-byte aligned
    size_t floats = 0;
  };
  std::vector<Scratch> thread_scratch_;  // per thread, grow-only
  Scratch packed_act_;                   // float prefill activations, packed; grow-only
  cpu::WeightArena arena_;             // what UploadWeight copied
  bool warned_in_place_ = false;       // UploadWeight said it ran out of room to copy
  // The table (row p: position p) for these frequencies (half of them), its rows made up
  // to the largest of pos[0..n); null when one of them is negative or past
  // kMaxRopeTablePositions (Rope then computes its angles as it goes).
  const float* RopeAngles(const float* freq, int half, const int32_t* pos, int64_t n);
  // Grows *s to at least `floats` floats (contents not kept).
  static void GrowScratch(Scratch* s, size_t floats);
  // Runs run(r0, r1, thread) over rows [0, rows) of a matmul of n tokens doing `work`
  // multiply-adds, in ranges whose bounds are multiples of `unit` (or `rows`); calls
  // before_split() first when the rows are split over threads (not when one thread runs
  // them all).
  void SplitRows(int64_t rows, int64_t work, int64_t n, int64_t unit,
                 absl::FunctionRef<void()> before_split,
                 absl::FunctionRef<void(int64_t, int64_t, int)> run);
  // The matmul of w by n prepared activation rows (x, x_stride bytes apart) into y, all
  // rows (the caller sets its row range and scratch).
  static cpu::MatmulTask TaskOf(const TensorView& w, const uint8_t* x, size_t x_stride,
                                int64_t n, float* y);
  // Runs body over [0, count): split over the threads (ParallelFor, inner boundaries
  // multiples of grain) when count > 1 and `work` (the elements the call touches) reaches
  // kMinParallelWork, else body(0, count) on the caller. Every op but the matmuls and
  // attention splits this way.
  void ForRange(int64_t count, int64_t grain, int64_t work,
                absl::FunctionRef<void(int64_t, int64_t)> body);
  // Grows every thread's scratch to at least `floats` floats.
  void EnsureThreadScratch(size_t floats);
};

}  // namespace cascade

#endif  // CASCADE_KERNELS_CPU_CPU_BACKEND_H_
