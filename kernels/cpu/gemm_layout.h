// Internal: what the AVX2 kernels share with the AVX-512 ones: the data layout of the
// lane-major float GEMM (prefill with F32/F16/BF16 weights; AVX2 in kernels_avx2.cc, 16-float
// vectors in gemm_lanes.h) and the AVX2 functions that pack weights and activations for
// both (kernels_avx2.cc, kernels_avx2_quant.cc).
//
// Contract: everything here is plain data, integer arithmetic defined out of line in
// gemm_layout.cc (compiled without ISA flags), or an out-of-line AVX2 function, so
// translation units compiled for different ISAs can share it without the linker ever
// handing one of them another ISA's copy of an inline function. Call the AVX2 functions
// only when the CPU has AVX2+FMA+F16C. They never allocate; outputs must hold what the
// layout says.
//
// The GEMM's reduction order is kernel_table.h's: output (token, row) sums the products of
// elements e with e % 8 == lane in eight lane chains, each over its steps s (element
// 8 * s + lane) in order, then adds the lanes in ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). So the
// GEMM is eight matrix products of depth steps = ceil(k / 8), one per lane, and both the
// activations and the weights are packed lane by lane:
// - activations, per token block: (lane, chunk of kGemmChunkSteps steps, tile of
//   kGemmTokens tokens, step in chunk, token in tile);
// - a weight panel of P rows: (lane, step, row in panel), P = 16 (AVX2) or 32 (AVX-512).
#ifndef CASCADE_KERNELS_CPU_GEMM_LAYOUT_H_
#define CASCADE_KERNELS_CPU_GEMM_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu {

// Float matmuls of at least this many tokens use the GEMM (fewer: direct tiles).
inline constexpr int64_t kGemmMinTokens = 16;
// Tokens per register tile (broadcast one at a time).
inline constexpr int kGemmTokens = 6;
// Tokens packed per block (every block re-packs the weight panels).
inline constexpr int64_t kGemmBlockTokens = 132;
// Steps per sub-panel: each lane's weights are swept in chunks of this many steps (kept
// in L1) by every token tile of the block.
inline constexpr int64_t kGemmChunkSteps = 128;
// Floats of one tile's chunk of one lane: (step in chunk, token in tile).
inline constexpr int64_t kTileChunk = kGemmChunkSteps * kGemmTokens;
static_assert(kGemmBlockTokens % kGemmTokens == 0, "token blocks hold whole tiles");

// Where a packed (lane, step) starts: lane * lane_floats + (step / kGemmChunkSteps) *
// chunk_floats + (step % kGemmChunkSteps) * slot floats.
struct LaneLayout {
  int64_t lane_floats = 0, chunk_floats = 0, slot = 0;
};

// The token blocks of the GEMM for n activation rows of k elements: equal blocks of whole
// tiles, none over kGemmBlockTokens.
struct GemmBlocks {
  GemmBlocks(int64_t n, int64_t k);
  int64_t n, k;
  int64_t kp;      // k rounded up to 8
  int64_t steps;   // kp / 8: the depth of each lane's product
  int64_t chunks;  // steps in chunks of kGemmChunkSteps, rounded up
  int64_t nb;      // tokens per block (the last may hold fewer)
  int64_t blocks;

  int64_t Count(int64_t b) const;  // tokens in block b
  int64_t Tiles(int64_t b) const;  // tiles in block b (the last may be partial)
  // Floats of one packed block, whatever its count (blocks sit this far apart).
  int64_t BlockFloats() const;
  LaneLayout XLayout(int64_t b) const;  // block b's packed activations
};

// The token block of a blocked quantized matmul (AVX2 and 16-lane kernels) over n
// activation rows of row_bytes bytes: blocks of equal size, in whole tiles of `tile`
// tokens, each at most as many rows as fit in about half of a 512 KiB L2 (at most 255) and
// at least one tile. A blocked matmul re-expands its weight panels for every block, so a
// small last block would pay that cost for few tokens.
int64_t EqualTokenBlock(int64_t n, size_t row_bytes, int tile);

// AVX2 (kernels_avx2.cc). Packs the t.k-element float activation rows of block b of
// GemmBlocks(t.n, t.k) (t.x, t.x_stride) into out, as the GEMM reads them.
void PackGemmActivationBlock(const MatmulTask& t, int64_t b, float* out);
// AVX2 (kernels_avx2.cc). Converts 8 weight rows of k elements of `type` (F32, F16 or
// BF16; a null row packs zeros) to floats and packs them lane-major: row q's element
// 8 * s + lane goes to out[lane * at.lane_floats + (s / kGemmChunkSteps) * at.chunk_floats
// + (s % kGemmChunkSteps) * at.slot + q], for every s < ceil(k / 8).
void PackGemmWeightRows(TensorType type, const uint8_t* const* rows, int64_t k, float* out,
                        const LaneLayout& at);

// AVX2 (kernels_avx2_quant.cc). Expands 8 rows of nb Q8_0, Q4_0, Q5_0, IQ4_NL or IQ4_XS
// 32-element blocks (type; Q4_0 as unsigned nibbles u = code + 8, Q5_0 as signed codes
// u - 16, IQ4 as their signed levels, IQ4_XS with each sub-block's float scale) interleaved for the blocked integer kernels: the 4 codes
// at 4g of block b of all 8 rows (32 bytes, row after row) at codes + b * block_bytes +
// g * block_bytes / 8, and row j's scale of block b (as float) at scales[b * scale_stride
// + j].
void ExpandQuantRows8(TensorType type, const uint8_t* const* rows, int64_t nb, int8_t* codes,
                      int64_t block_bytes, float* scales, int64_t scale_stride);

// Where ExpandKQuantRows8 writes 8 rows of K-quant super-blocks (outputs for row j of the
// 8 start at j: pass pointers offset by the rows' first lane).
struct KRows8Out {
  uint8_t* codes;       // group g (4 codes of each row) of block b at b * block_bytes +
  int64_t block_bytes;  //   g * group_bytes, 32 bytes, row after row (64 groups)
  int64_t group_bytes;
  int32_t* scales;       // (block, 16-element sub-block s, lane): its integer scale
  int32_t* mins;         // (block, i, lane): int16 pair multiplying bsums 2i, 2i + 1
  float* d;              // (block, lane)
  float* dmin;           // (block, lane); 0 for Q6_K
  int64_t block_stride;  // lanes per (block) or (block, s) row of scales/mins/d/dmin
};

// AVX2 (kernels_avx2_kquant.cc). Expands 8 rows of nb Q4_K, Q5_K or Q6_K super-blocks
// (`type`) for the 16-lane K-quant kernel: unsigned codes (Q6_K: code + 32), per 16
// elements the sub-block scale (Q4_K/Q5_K: that of its 32-element sub-block), and the min
// pairs: Q4_K/Q5_K (m_i, m_i) for the 32-element sub-block i; Q6_K (32 s_2i, 32 s_2i+1),
// the -32 code offset. With the activations' bsums: M = sum over i of the pair times
// (bsums[2i], bsums[2i + 1]).
void ExpandKQuantRows8(TensorType type, const uint8_t* const* rows, int64_t nb,
                       const KRows8Out& out);

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_GEMM_LAYOUT_H_
