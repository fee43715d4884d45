// Internal: the lane-major float GEMM (gemm_layout.h) written once for any vector of W
// floats, so that the AVX2 kernels (kernels_avx2.cc, W = 8), the AVX-512 ones
// (kernels_avx512.cc, W = 16) and a test that runs everywhere (kernels_avx512_test.cc, W = 16
// as plain arrays with std::fma) execute the same code. Every width computes the same bits:
// the same FMAs in the same order per output; only the panels (2W rows) and the register
// tiles (2W rows x 6 tokens, two tiles at a time where the ISA has registers for them)
// differ.
//
// P provides: kWidth (W), kPairTiles (whether 2 x 2 x 6 accumulators fit in registers), a
// vector type V of W floats and static functions Zero(), Load(const float*),
// Store(float*, V), StoreFirst(float*, V, int count) (lanes [0, count) only),
// Splat(const float*) (one float in every lane), Fma(a, b, c) = a * b + c rounded once per
// lane, Add(a, b).
//
// Contract: every function here is a template on P, so translation units built for
// different ISAs instantiate different functions (never one ISA's copy of another's). The
// caller includes this header only where P's instructions are enabled, calls LaneGemm only
// for t.n >= kGemmMinTokens, on a CPU with AVX2+FMA+F16C (the panels are packed by
// kernels_avx2.cc), for F32/F16/BF16 weights, or with kDequant for any type DequantizeRow
// takes (its rows are dequantized to floats first; W = 8 only, for the scratch). t.scratch
// holds ScratchFloats(t.k) floats, 64-byte aligned. Thread-safe: it touches only t's output
// rows and t.scratch; it never allocates.
#ifndef CASCADE_KERNELS_CPU_GEMM_LANES_H_
#define CASCADE_KERNELS_CPU_GEMM_LANES_H_

#include <cstdint>

#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/kernel_table.h"
#include "tensor/quant.h"

namespace cascade::cpu::lanes {

// Weight rows per packed panel: two vectors.
template <class P>
constexpr int PanelRows() {
  return 2 * P::kWidth;
}
// One tile's sums of a lane: (6 tokens, panel rows).
template <class P>
constexpr int64_t TileSums() {
  return kGemmTokens * PanelRows<P>();
}
// Scratch: the panel, the dequantized rows (kDequant), a packed block (kGemmBlockTokens
// rows of k rounded up to whole chunks: at most 8 * kGemmChunkSteps floats each over kp)
// per element, and the lane sums out of the 264 Ki spare floats.
template <class P, bool kDequant>
constexpr bool FitsScratch() {
  const int64_t rows = PanelRows<P>() * (kDequant ? 2 : 1) + kGemmBlockTokens;
  const int64_t spare =
      kGemmBlockTokens * 8 * kGemmChunkSteps + kGemmBlockTokens / kGemmTokens * 8 * TileSums<P>();
  return rows <= kScratchRowsPerElement && spare <= 264 * 1024;
}

// The lane sums of U token tiles (kGemmTokens each) x V vectors of W panel rows over
// `steps` steps: wl holds (step, 2W rows), xl[u] (step, 6 tokens), sums[u] (6 tokens, 2W
// rows); starts from zero when `first`, else continues sums.
template <class P, int V, int U>
void LaneTile(const float* wl, const float* const* xl, int64_t steps, bool first,
              float* const* sums) {
  using Vec = typename P::V;
  constexpr int W = P::kWidth, kRows = PanelRows<P>();
  Vec acc[U][kGemmTokens][V];
  for (int u = 0; u < U; ++u) {
    for (int c = 0; c < kGemmTokens; ++c) {
      for (int h = 0; h < V; ++h) {
        acc[u][c][h] = first ? P::Zero() : P::Load(sums[u] + c * kRows + W * h);
      }
    }
  }
  const float* xq[U];
  for (int u = 0; u < U; ++u) xq[u] = xl[u];
  const float* wq = wl;
  for (int64_t s = 0; s < steps; ++s, wq += kRows) {
    Vec w[V];
    for (int h = 0; h < V; ++h) w[h] = P::Load(wq + W * h);
    for (int u = 0; u < U; ++u) {
      for (int c = 0; c < kGemmTokens; ++c) {
        const Vec b = P::Splat(xq[u] + c);
        for (int h = 0; h < V; ++h) acc[u][c][h] = P::Fma(w[h], b, acc[u][c][h]);
      }
      xq[u] += kGemmTokens;
    }
  }
  for (int u = 0; u < U; ++u) {
    for (int c = 0; c < kGemmTokens; ++c) {
      for (int h = 0; h < V; ++h) P::Store(sums[u] + c * kRows + W * h, acc[u][c][h]);
    }
  }
}

// One lane's chunk of steps for every tile of a block: tiles in pairs where P has the
// registers, then one at a time.
template <class P, int V>
void LaneChunk(const float* wl, const float* xl, int64_t steps, bool first, int64_t tiles,
               float* sums) {
  constexpr int64_t kSums = 8 * TileSums<P>();  // (lane, tile sums) of one tile
  int64_t tile = 0;
  if constexpr (P::kPairTiles) {
    for (; tile + 2 <= tiles; tile += 2) {
      const float* x2[2] = {xl + tile * kTileChunk, xl + (tile + 1) * kTileChunk};
      float* s2[2] = {sums + tile * kSums, sums + (tile + 1) * kSums};
      LaneTile<P, V, 2>(wl, x2, steps, first, s2);
    }
  }
  for (; tile < tiles; ++tile) {
    const float* x1[1] = {xl + tile * kTileChunk};
    float* s1[1] = {sums + tile * kSums};
    LaneTile<P, V, 1>(wl, x1, steps, first, s1);
  }
}

// y[token][r0 + i] for the panel's `valid` rows from the lane sums of block tokens
// [0, count): each output's eight lanes added in ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
template <class P>
void ReduceLaneSums(const float* sums, int64_t count, int valid, float* y, int64_t ldy) {
  using Vec = typename P::V;
  constexpr int W = P::kWidth;
  constexpr int64_t kSums = TileSums<P>();
  for (int64_t i = 0; i < count; ++i) {
    const float* ts = sums + (i / kGemmTokens) * 8 * kSums + (i % kGemmTokens) * PanelRows<P>();
    for (int h = 0; W * h < valid; ++h) {
      Vec l[8];
      for (int j = 0; j < 8; ++j) l[j] = P::Load(ts + j * kSums + W * h);
      const Vec sum = P::Add(P::Add(P::Add(l[0], l[4]), P::Add(l[2], l[6])),
                             P::Add(P::Add(l[1], l[5]), P::Add(l[3], l[7])));
      const int n_out = valid - W * h < W ? valid - W * h : W;
      if (n_out == W) {
        P::Store(y + i * ldy + W * h, sum);
      } else {
        P::StoreFirst(y + i * ldy + W * h, sum, n_out);
      }
    }
  }
}

// Rows [t.r0, t.r1) of y = x w^T for all t.n tokens (see the contract above).
template <class P, bool kDequant = false>
void LaneGemm(const MatmulTask& t, TensorType type) {
  static_assert(FitsScratch<P, kDequant>(), "the GEMM's buffers fit in ScratchFloats(k)");
  constexpr int kRows = PanelRows<P>();
  const GemmBlocks g(t.n, t.k);
  const int64_t steps = g.steps;
  // Scratch: panel (lane, step, 2W rows) | [dequantized rows (2W, kp)] | own packed block |
  // sums (tile, lane, 6, 2W).
  float* wp = t.scratch;
  float* deq = wp + kRows * g.kp;
  float* own_x = deq + (kDequant ? kRows * g.kp : 0);
  float* sums = own_x + g.BlockFloats();
  const LaneLayout w_at{steps * kRows, kGemmChunkSteps * kRows, kRows};
  for (int64_t b = 0; b < g.blocks; ++b) {
    const int64_t count = g.Count(b), tiles = g.Tiles(b);
    const LaneLayout x_at = g.XLayout(b);
    const float* xp = own_x;
    if (t.packed_x != nullptr) {
      xp = t.packed_x + b * g.BlockFloats();
    } else {
      PackGemmActivationBlock(t, b, own_x);
    }
    for (int64_t r = t.r0; r < t.r1; r += kRows) {
      const int valid = static_cast<int>(t.r1 - r < kRows ? t.r1 - r : kRows);
      for (int v = 0; v < kRows / 8; ++v) {  // 8 rows at a time; past r1: zeros
        const uint8_t* src[8] = {};
        for (int q = 0; q < 8 && 8 * v + q < valid; ++q) {
          src[q] = t.w + (r + 8 * v + q) * t.w_stride;
          if constexpr (kDequant) {
            float* d = deq + (8 * v + q) * g.kp;
            DequantizeRow(type, src[q], t.k, d);
            src[q] = reinterpret_cast<const uint8_t*>(d);
          }
        }
        PackGemmWeightRows(kDequant ? TensorType::kF32 : type, src, t.k, wp + 8 * v, w_at);
      }
      for (int j = 0; j < 8; ++j) {
        const float* wl = wp + j * w_at.lane_floats;
        for (int64_t s0 = 0; s0 < steps; s0 += kGemmChunkSteps) {
          const int64_t n_steps = steps - s0 < kGemmChunkSteps ? steps - s0 : kGemmChunkSteps;
          const float* xl = xp + j * x_at.lane_floats + s0 / kGemmChunkSteps * x_at.chunk_floats;
          float* lane_sums = sums + j * TileSums<P>();
          if (valid > P::kWidth) {
            LaneChunk<P, 2>(wl + s0 * kRows, xl, n_steps, s0 == 0, tiles, lane_sums);
          } else {
            LaneChunk<P, 1>(wl + s0 * kRows, xl, n_steps, s0 == 0, tiles, lane_sums);
          }
        }
      }
      ReduceLaneSums<P>(sums, count, valid, t.y + b * g.nb * t.ldy + r, t.ldy);
    }
  }
}

}  // namespace cascade::cpu::lanes

#endif  // CASCADE_KERNELS_CPU_GEMM_LANES_H_
