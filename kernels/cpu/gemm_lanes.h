// Internal: the lane-major float GEMM (gemm_layout.h) written once for any 16-float vector
// type, so that the AVX-512 kernels (kernels_avx512.cc, P = 512-bit registers) and a test
// that runs everywhere (kernels_avx512_test.cc, P = plain arrays with std::fma) execute
// the same code. It computes bit for bit what the AVX2 GEMM computes: the same FMAs in the same
// order per output, only with 32-row panels and 32 x 12 register tiles (24 accumulators;
// AVX2 has registers for 16 x 6).
//
// P provides: a vector type V of 16 floats and static functions Zero(), Load(const float*),
// Store(float*, V), StoreFirst(float*, V, int count) (lanes [0, count) only),
// Splat(const float*) (one float in every lane), Fma(a, b, c) = a * b + c rounded once per
// lane, Add(a, b).
//
// Contract: every function here is a template on P, so translation units built for
// different ISAs instantiate different functions (never one ISA's copy of another's). The
// caller includes this header only where P's instructions are enabled, calls LaneGemm only
// for F32/F16/BF16 weights, t.n >= kGemmMinTokens, and on a CPU with AVX2+FMA+F16C (the
// panels are packed by kernels_avx2.cc). t.scratch holds ScratchFloats(t.k) floats, 64-byte
// aligned. Thread-safe: it touches only t's output rows and t.scratch; it never allocates.
#ifndef CASCADE_KERNELS_CPU_GEMM_LANES_H_
#define CASCADE_KERNELS_CPU_GEMM_LANES_H_

#include <cstdint>

#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/kernel_table.h"

namespace cascade::cpu::lanes16 {

inline constexpr int kPanelRows = 32;  // weight rows per packed panel: two vectors
inline constexpr int64_t kTileSums = kGemmTokens * kPanelRows;  // one tile's sums of a lane
// Scratch: the panel and a packed block (kGemmBlockTokens rows of k rounded up to whole
// chunks: at most 8 * kGemmChunkSteps floats each over kp) per element, and the lane sums
// out of the 264 Ki spare floats (as the AVX2 GEMM).
static_assert(kPanelRows + kGemmBlockTokens <= kScratchRowsPerElement &&
                  kGemmBlockTokens * 8 * kGemmChunkSteps +
                          kGemmBlockTokens / kGemmTokens * 8 * kTileSums <=
                      264 * 1024,
              "the panel, a packed block and the lane sums fit in ScratchFloats(k)");

// The lane sums of U token tiles (kGemmTokens each) x V vectors of 16 panel rows over
// `steps` steps: wl holds (step, 32 rows), xl[u] (step, 6 tokens), sums[u] (6 tokens, 32
// rows); starts from zero when `first`, else continues sums.
template <class P, int V, int U>
void LaneTile(const float* wl, const float* const* xl, int64_t steps, bool first,
              float* const* sums) {
  using Vec = typename P::V;
  Vec acc[U][kGemmTokens][V];
  for (int u = 0; u < U; ++u) {
    for (int c = 0; c < kGemmTokens; ++c) {
      for (int h = 0; h < V; ++h) {
        acc[u][c][h] = first ? P::Zero() : P::Load(sums[u] + c * kPanelRows + 16 * h);
      }
    }
  }
  const float* xq[U];
  for (int u = 0; u < U; ++u) xq[u] = xl[u];
  const float* wq = wl;
  for (int64_t s = 0; s < steps; ++s, wq += kPanelRows) {
    Vec w[V];
    for (int h = 0; h < V; ++h) w[h] = P::Load(wq + 16 * h);
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
      for (int h = 0; h < V; ++h) P::Store(sums[u] + c * kPanelRows + 16 * h, acc[u][c][h]);
    }
  }
}

// One lane's chunk of steps for every tile of a block: tiles in pairs, then the odd one.
template <class P, int V>
void LaneChunk(const float* wl, const float* xl, int64_t steps, bool first, int64_t tiles,
               float* sums) {
  int64_t tile = 0;
  for (; tile + 2 <= tiles; tile += 2) {
    const float* x2[2] = {xl + tile * kTileChunk, xl + (tile + 1) * kTileChunk};
    float* s2[2] = {sums + tile * 8 * kTileSums, sums + (tile + 1) * 8 * kTileSums};
    LaneTile<P, V, 2>(wl, x2, steps, first, s2);
  }
  if (tile < tiles) {
    const float* x1[1] = {xl + tile * kTileChunk};
    float* s1[1] = {sums + tile * 8 * kTileSums};
    LaneTile<P, V, 1>(wl, x1, steps, first, s1);
  }
}

// y[token][r0 + i] for the panel's `valid` rows from the lane sums of block tokens
// [0, count): each output's eight lanes added in ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
template <class P>
void ReduceLaneSums(const float* sums, int64_t count, int valid, float* y, int64_t ldy) {
  using Vec = typename P::V;
  for (int64_t i = 0; i < count; ++i) {
    const float* ts = sums + (i / kGemmTokens) * 8 * kTileSums + (i % kGemmTokens) * kPanelRows;
    for (int h = 0; 16 * h < valid; ++h) {
      Vec l[8];
      for (int j = 0; j < 8; ++j) l[j] = P::Load(ts + j * kTileSums + 16 * h);
      const Vec sum = P::Add(P::Add(P::Add(l[0], l[4]), P::Add(l[2], l[6])),
                             P::Add(P::Add(l[1], l[5]), P::Add(l[3], l[7])));
      const int n_out = valid - 16 * h < 16 ? valid - 16 * h : 16;
      if (n_out == 16) {
        P::Store(y + i * ldy + 16 * h, sum);
      } else {
        P::StoreFirst(y + i * ldy + 16 * h, sum, n_out);
      }
    }
  }
}

// Rows [t.r0, t.r1) of y = x w^T for all t.n tokens (see the contract above).
template <class P>
void LaneGemm(const MatmulTask& t, TensorType type) {
  const GemmBlocks g(t.n, t.k);
  const int64_t steps = g.steps;
  // Scratch: panel (lane, step, 32 rows) | own packed block | sums (tile, lane, 6, 32).
  float* wp = t.scratch;
  float* own_x = wp + kPanelRows * g.kp;
  float* sums = own_x + g.BlockFloats();
  const LaneLayout w_at{steps * kPanelRows, kGemmChunkSteps * kPanelRows, kPanelRows};
  for (int64_t b = 0; b < g.blocks; ++b) {
    const int64_t count = g.Count(b), tiles = g.Tiles(b);
    const LaneLayout x_at = g.XLayout(b);
    const float* xp = own_x;
    if (t.packed_x != nullptr) {
      xp = t.packed_x + b * g.BlockFloats();
    } else {
      PackGemmActivationBlock(t, b, own_x);
    }
    for (int64_t r = t.r0; r < t.r1; r += kPanelRows) {
      const int valid = static_cast<int>(t.r1 - r < kPanelRows ? t.r1 - r : kPanelRows);
      for (int v = 0; v < kPanelRows / 8; ++v) {  // 8 rows at a time; past r1: zeros
        const uint8_t* src[8] = {};
        for (int q = 0; q < 8 && 8 * v + q < valid; ++q) {
          src[q] = t.w + (r + 8 * v + q) * t.w_stride;
        }
        PackGemmWeightRows(type, src, t.k, wp + 8 * v, w_at);
      }
      for (int j = 0; j < 8; ++j) {
        const float* wl = wp + j * w_at.lane_floats;
        for (int64_t s0 = 0; s0 < steps; s0 += kGemmChunkSteps) {
          const int64_t n_steps = steps - s0 < kGemmChunkSteps ? steps - s0 : kGemmChunkSteps;
          const float* xl = xp + j * x_at.lane_floats + s0 / kGemmChunkSteps * x_at.chunk_floats;
          float* lane_sums = sums + j * kTileSums;
          if (valid > 16) {
            LaneChunk<P, 2>(wl + s0 * kPanelRows, xl, n_steps, s0 == 0, tiles, lane_sums);
          } else {
            LaneChunk<P, 1>(wl + s0 * kPanelRows, xl, n_steps, s0 == 0, tiles, lane_sums);
          }
        }
      }
      ReduceLaneSums<P>(sums, count, valid, t.y + b * g.nb * t.ldy + r, t.ldy);
    }
  }
}

}  // namespace cascade::cpu::lanes16

#endif  // CASCADE_KERNELS_CPU_GEMM_LANES_H_
