// Internal: the per-ISA kernel entry points the CPU backend dispatches to.
//
// Contract: each ISA (scalar, AVX2, AVX-512) provides one KernelTable, compiled in its own
// translation unit for that ISA; KernelTableFor() returns the table for an ISA the CPU
// supports (never call into a table the CPU lacks). The AVX-512 table is the AVX2 one with
// the float GEMM in 512-bit registers (gemm_lanes.h) and, with
// VNNI, the blocked Q8_0/Q4_0 and K-quant matmuls on byte dot products (quant_lanes.h) and
// their decode kernels (avx512_decode.h), each bit for bit the AVX2 kernel's results.
// Kernels are pure functions of their arguments and thread-safe; they never allocate
// (matmuls use MatmulTask::scratch).
//
// Batch invariance: a matmul kernel computes every output element y[t][r] with the same
// reduction order whatever n, r0/r1, tile or thread it is called with. The order is fixed
// per ISA and weight format:
// - float activations (F32/F16/BF16 weights, or quantized weights dequantized exactly):
//   eight lanes accumulate the products of elements e with e % 8 == lane in element order
//   (scalar: multiply then add; AVX2 and AVX-512: FMA, whatever register lanes hold them),
//   then the lanes are summed as
//   ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7));
// - Q8_0/Q4_0 x Q8_0 activations: per 32-element block, exact integer sums; scalar: 8
//   lanes of 4 elements, each lane += sum * (d_w * d_x), lanes reduced as above; AVX2: the
//   block's whole integer sum S, y = fma(S, d_w * d_x, y) block after block (AVX-512: the
//   same, whatever lanes and instructions form S);
// - Q4_1/Q5_0/Q5_1 x Q8_0 activations: as Q8_0 on unsigned codes; scalar: the lanes of
//   the codes' products (Q5_0: codes - 16), Q4_1/Q5_1's minimum m_w d_x sum(x) per block in
//   one running sum added after the lane reduction; AVX2 (and AVX-512, which uses it): per
//   block y = fma(S, d_w d_x, y), then y = fma(sum(x), m_w d_x, y) (Q5_0: S - 16 sum(x));
// - IQ4_NL x Q8_0 activations: exactly as Q8_0, its levels kIq4Levels[q] being the
//   signed codes (every ISA and tile, VNNI included);
// - IQ4_XS x Q8_0 activations: as Q8_0 on the signed levels, per 32-element block with its
//   float scale d * (scale - 32) (tensor/quant_iq4.h);
// - K-quants x Q8_K: per super-block, exact integer sums; scalar: 8 lanes (e % 8) scaled
//   by d_w * d_x, the min terms in one running sum, lanes reduced as above; AVX2: the
//   super-block's whole sums S and M, y = fma(S, d_w * d_x, y) then y = fma(-M, dmin_w *
//   d_x, y) (Q3_K, Q6_K: y = fma(S - M, d_w * d_x, y)) super-block after super-block.
// Scalar and AVX2 therefore agree to rounding, not bit for bit; AVX-512 and AVX2 agree bit for
// bit.
#ifndef CASCADE_KERNELS_CPU_KERNEL_TABLE_H_
#define CASCADE_KERNELS_CPU_KERNEL_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu {

// How activations are presented to a matmul kernel.
enum class ActFormat {
  kF32,   // plain floats
  kQ8_0,  // BlockQ8_0 per 32 elements (Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / IQ4_XS)
  kQ8K,   // BlockQ8K per 256 elements (for K-quant weights, Q2_K..Q6_K)
};

// The activation format a weight type is multiplied with. With quantized_activations off,
// quantized weights are dequantized and multiplied in F32 (slower, closest to exact).
ActFormat ActFormatFor(TensorType weight_type, bool quantized_activations);
// Bytes of one prepared activation row of k elements.
size_t ActRowBytes(ActFormat f, int64_t k);

struct MatmulTask {
  const uint8_t* w = nullptr;  // weight rows, w_stride bytes apart
  size_t w_stride = 0;
  int64_t k = 0;               // elements per row
  const uint8_t* x = nullptr;  // prepared activation rows, x_stride bytes apart
  size_t x_stride = 0;
  int64_t n = 0;       // activation rows
  float* y = nullptr;  // output: y[t * ldy + r]
  int64_t ldy = 0;
  int64_t r0 = 0, r1 = 0;    // weight rows to compute
  float* scratch = nullptr;  // per-thread, 64-byte aligned, >= ScratchFloats(k) floats
  // ActFormat::kF32 only, when packed_f32_floats(type, n, k) > 0: the activations as pack_f32
  // laid them out (shared by every thread of the matmul); null: the kernel packs its own.
  const float* packed_x = nullptr;
};
// Scratch floats a matmul kernel may use for rows of k elements (k rounded up to 8): 164
// per element for panels of converted or packed weight rows and packed activations (the
// float GEMM: 2 x 16 weight rows and 132 tokens), plus 264 Ki floats of partial sums.
inline constexpr int64_t kScratchRowsPerElement = 164;
inline size_t ScratchFloats(int64_t k) {
  return static_cast<size_t>(kScratchRowsPerElement * ((k + 7) / 8 * 8) + 264 * 1024);
}

using MatmulFn = void (*)(const MatmulTask&);

// Queries of one sequence that KernelTable::attention_group takes at once: 16 prompt
// positions share each K/V block while it is in L1.
inline constexpr int kAttentionTile = 16;

// The grouped matmul (KernelTable::grouped_matmul).
using GroupedMatmulFn = void (*)(const MatmulTask& t, TensorType type);

struct KernelTable {
  CpuIsa isa;
  // Matmul for a weight type and activation format; null when the pair is unsupported.
  MatmulFn (*matmul)(TensorType weight_type, ActFormat act);
  void (*quantize_q8_0)(const float* x, int64_t k, void* out);  // k % 32 == 0
  void (*quantize_q8k)(const float* x, int64_t k, void* out);   // k % 256 == 0
  // Canonical-order dot product of two float vectors.
  float (*dot)(const float* a, const float* b, int64_t n);
  // y += a * x
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // y *= a
  void (*scale)(float a, float* y, int64_t n);
  // Sum of squares in canonical order.
  float (*sum_squares)(const float* x, int64_t n);
  // out[i] = silu(gate[i]) * up[i]; out may alias gate.
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);
  // out[i] = gelu_tanh(gate[i]) * up[i] (Backend::GeluMul), as gate[i] / (1 + exp(-2 u)) *
  // up[i] with -2u = gate[i] * (kGeluA + kGeluB gate[i]^2); out may alias gate.
  void (*gelu_mul)(const float* gate, const float* up, int64_t n, float* out);
  // out[i] = FloatToFp16(x[i]) (util/fp16.h) bit for bit, i < n: how rows enter an F16 KV
  // cache.
  void (*float_to_f16)(const float* x, int64_t n, uint16_t* out);
  // Attention of queries qs[0..n) (1 <= n <= kAttentionTile) of one sequence (the same
  // block table; any n_ctx each) for the heads that share KV head `kv_head` (a GQA group),
  // each with an online softmax over its KV blocks in order. Each head's result depends
  // only on its own q, the cache and the parameters: the same bits whatever the other
  // queries of the tile, or alone (n = 1). The kernels walk the blocks once for the tile,
  // every query in turn on a block while it is in L1 (and converted once, for an F16
  // cache), where one query at a time re-read the whole prefix per query of a prompt.
  // `scratch` holds (n_heads / n_kv_heads) * block_size + KvBlockScratchFloats(p) floats
  // (kv_block.h: an F16 cache's block is converted there, exactly, and the F32 algorithm
  // runs on it).
  void (*attention_group)(const AttentionParams& p, const AttentionQuery* qs, int n, int kv_head,
                          float* scratch);
  // Float activations packed once per matmul and shared by its threads (null where the
  // ISA's float matmul packs none). packed_f32_floats(type, n, k): the floats n activation
  // rows of k elements take packed for a matmul of `type` weights, 0 when that matmul reads
  // no packed activations (the layout is the kernel's: AVX2 the GEMM's tiles from
  // kGemmMinTokens tokens on; AVX-512 also the token pairs of 3-16 tokens of float weights).
  // pack_f32(type, t, part, parts, out): packs share `part` of `parts` of t's activations
  // (t.x, t.x_stride, t.n, t.k) into out (64-byte aligned); the parts may run concurrently.
  size_t (*packed_f32_floats)(TensorType type, int64_t n, int64_t k) = nullptr;
  void (*pack_f32)(TensorType type, const MatmulTask& t, int part, int parts, float* out) = nullptr;
  // Weights grouped 16 rows at a time (row_groups.h) x quantized activations, any number
  // of tokens: groups(type) says which types (AVX2: Q4_0, Q4_K; AVX-512 VNNI: Q8_0, Q4_0 and
  // Q4_K); all null where the ISA has no such kernel (then no weight is grouped), and a
  // weight of another type stays in the file's layout. The activations are prepared once
  // per matmul:
  // grouped_tokens_bytes(type, n, k) bytes, rows [i0, i1) written by prepare_grouped
  // (ranges may run concurrently); then
  // grouped_matmul(t, type) with t.x the prepared rows and t.r0, t.r1 multiples of 16.
  // Bit for bit the AVX2 kernels' results on the weight's file layout.
  bool (*groups)(TensorType type) = nullptr;
  size_t (*grouped_tokens_bytes)(TensorType type, int64_t n, int64_t k) = nullptr;
  void (*prepare_grouped)(TensorType type, const float* x, int64_t k, int64_t n, int64_t i0,
                          int64_t i1, uint8_t* out) = nullptr;
  GroupedMatmulFn grouped_matmul = nullptr;
};

const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();  // call only when the CPU has AVX-512 F/BW/VL/DQ
const KernelTable& KernelTableFor(CpuIsa isa);
// The AVX2 table's F32 / F16 / BF16 weights x float activations (nullptr for other
// types) with one-token tiles of one_token_rows (2 or 8) rows; the tile changes no result
// (the table takes OneTokenFloatRows(DetectCpuFeatures())).
MatmulFn Avx2FloatMatmul(TensorType type, int one_token_rows);
// The one-token tile for this core: 8 rows (eight FMA chains), except on Zen 4 (AMD
// family 19h with AVX-512; Zen 3, the same family, has none), where two adjacent rows (two
// chains) read the memory at its rate and eight interleaved row streams did not
// (kernel_bench BM_DecodeLayers F16, one thread, 768-wide layers: 16.4-19.2 GiB/s with 8
// rows, 22.1-25.8 with 2). Where measured, 8 rows win elsewhere: Zen 3 read F16 at 87-99%
// of its memory's rate with them; a Zen 5 (family 1Ah) is held back by two chains (768 /
// 2048-wide layers 15.7-23.0 / 13.5-20.5 GiB/s with 2 rows, 20.3-26.3 / 18.9-22.9 with 8;
// TinyLlama F16 decode 8.0-9.5 -> 11.3-12.3 tokens/s; plain read 23.5-27.6 GiB/s).
int OneTokenFloatRows(const CpuFeatures& cpu);
// Whether the Q4_K grouped passes prefetch 9 KiB ahead into L1 (grouped_sweep.h); the
// tables take the choice for DetectCpuFeatures() once, and it changes no result. Yes,
// except on Zen 4, whose hardware prefetcher keeps up and where the prefetches only cost
// (kernel_bench, one thread, GFLOP/s, two alternated rounds, 2026-12-03, with -> without):
// AVX-512 BM_DecodeLayers Q4_K tokens:1 65-67 -> 85-106, tokens:16 201-221 -> 263-265,
// BM_MatMul Q4_K n:1 90-92 -> 110-135, n:16 278-296 -> 316-318, n:128 279-312 -> 288-305;
// the AVX2 table there, tokens:1 51-54 -> 81. On Zen 5 it is the other way round
// (TinyLlama Q4_K decode 27-28 -> 45 tokens/s with it); Zen 3 keeps it, unmeasured.
bool PrefetchGroupedQ4K(const CpuFeatures& cpu);

// GeluMul's constants: -2 sqrt(2/pi) and -2 sqrt(2/pi) 0.044715.
inline constexpr float kGeluA = -1.5957691216057308f;
inline constexpr float kGeluB = -1.5957691216057308f * 0.044715f;

// Lane reduction shared by every ISA: ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
inline float ReduceLanes8(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// The quantized weight types every table computes exactly (dequantized to F32, F32
// activations): `pick(std::integral_constant<TensorType, T>{})` for a quantized `type`,
// nullptr for any other. One list, so a new type joins every table's exact path at once.
template <typename Pick>
MatmulFn ForQuantizedType(TensorType type, Pick pick) {
  switch (type) {
#define CASCADE_QUANTIZED_CASE(T) \
  case TensorType::T:             \
    return pick(std::integral_constant<TensorType, TensorType::T>{});
    CASCADE_QUANTIZED_CASE(kQ4_0)
    CASCADE_QUANTIZED_CASE(kQ8_0)
    CASCADE_QUANTIZED_CASE(kQ4_1)
    CASCADE_QUANTIZED_CASE(kQ5_0)
    CASCADE_QUANTIZED_CASE(kQ5_1)
    CASCADE_QUANTIZED_CASE(kQ2_K)
    CASCADE_QUANTIZED_CASE(kQ3_K)
    CASCADE_QUANTIZED_CASE(kQ4_K)
    CASCADE_QUANTIZED_CASE(kQ5_K)
    CASCADE_QUANTIZED_CASE(kQ6_K)
    CASCADE_QUANTIZED_CASE(kIQ4_NL)
    CASCADE_QUANTIZED_CASE(kIQ4_XS)
#undef CASCADE_QUANTIZED_CASE
    default:
      return nullptr;
  }
}

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_KERNEL_TABLE_H_
