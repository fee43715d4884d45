// Internal: the blocked Q8_0 / Q4_0 x Q8_0 matmul (prefill and micro-batches) for 16 int32
// lanes with a 4-way byte dot product (AVX-512 VNNI's vpdpbusd), written once for any such
// vector type P, so that the AVX-512 kernels (kernels_avx512.cc) and a test that runs
// everywhere (kernels_avx512_test.cc, plain arrays) execute the same code. It computes bit
// for bit what the AVX2 kernels compute (kernels_avx2_quant.cc): per output and 32-element
// block b in order, the block's exact integer dot product S_b, then acc = fma(S_b, d_w *
// d_x, acc).
//
// A 16-row panel holds, per block and group g of 4 codes, the 4 codes of every row (64
// bytes: lane r = row r), so one dot-product instruction adds group g's products of all
// 16 rows with one token's 4 codes broadcast. The instruction multiplies unsigned bytes by
// signed ones: Q4_0 weights are unsigned nibbles u = code + 8 times the signed activation
// codes, and S = sum(u x) - 8 sum(x); Q8_0 weights are signed and the activation codes are
// made unsigned, x + 128, so S = sum((x + 128) w) - 128 sum(w), with sum(w) per row and
// block taken by the same instruction against bytes of 1. All of it is exact in int32.
//
// K-quants (KQuantBlocked; Q4_K, Q5_K, Q6_K weights x Q8_K activations) follow the AVX2
// order of kernels_avx2_kquant.cc: per super-block b, S = sum over 16-element sub-blocks of
// their scale times the sub-block's code products (unsigned codes, one instruction per
// group of 4 as above), M = the min term (the activations' bsums times the rows' min
// pairs, Dot2), then acc = fma(S, d_w * d_x, acc) and acc = fma(-M, dmin_w * d_x, acc)
// (Q6_K: acc = fma(S - M, d_w * d_x, acc)).
//
// P provides int32 x 16 vectors IV and float x 16 vectors FV and static functions
// ZeroF(), SplatI(int32_t), LoadI(const void*) (64 bytes), Bcast4(const void*) (4 bytes into
// every lane), Dot4(IV acc, IV u, IV s) (lane i: acc + the sum of u's 4 unsigned bytes
// times s's 4 signed bytes of lane i), StoreI(int32_t*, IV), LoadF(const float*),
// SplatF(float), MulF, CvtF (int32 -> float), Fma(a, b, c) = a * b + c rounded once,
// StoreFirstF(float*, FV, int count); for K-quants also AddI, SubI, MulLoI (int32
// products, low halves), Dot2(IV acc, IV a, IV b) (lane i: acc + the sum of a's 2 int16
// times b's 2 int16) and Fnma(a, b, c) = c - a * b rounded once.
//
// Contract: as gemm_lanes.h (templates on P only; include where P's instructions are
// enabled). Call QuantBlocked for Q8_0, Q4_0, Q5_0, IQ4_NL or IQ4_XS weights (`type`; Q5_0's
// codes u - 16 and the IQ4 levels expanded as Q8_0's signed codes, IQ4_XS with a float scale per 32 elements) with t.x holding BlockQ8_0
// activation rows, KQuantBlocked for Q4_K/Q5_K/Q6_K with BlockQ8K rows, on a CPU with AVX2
// (the panels are expanded by kernels_avx2_quant.cc / kernels_avx2_kquant.cc).
// t.scratch holds ScratchFloats(t.k) floats. Thread-safe; never allocates.
#ifndef CASCADE_KERNELS_CPU_QUANT_LANES_H_
#define CASCADE_KERNELS_CPU_QUANT_LANES_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/with_width.h"
#include "tensor/quant.h"
#include "tensor/tensor_type.h"
#include "util/fp16.h"

namespace cascade::cpu::dot16 {

inline constexpr int kRows = 16;                     // panel rows, one per int32 lane
inline constexpr int64_t kBlockBytes = kRows * kQK;  // one block of a panel
inline constexpr int kTile = 8;                      // tokens per tile

// The 8 weight rows of half `half` of the 16-row panel at row r with `rows` valid rows
// (rows past them repeat the last one).
template <class P>
void PanelHalfRows(const MatmulTask& t, int64_t r, int rows, int half, const uint8_t** src) {
  for (int j = 0; j < 8; ++j) {
    const int row = 8 * half + j < rows ? 8 * half + j : rows - 1;
    src[j] = t.w + (r + row) * t.w_stride;
  }
}

// One tile: the panel's 16 rows x T tokens. xq[j]: token j's codes per block (32 bytes;
// Q8_0: made unsigned), xs[j] / base[j]: per block, its scale and the integer S starts
// from (Q4_0: -8 sum(x), a token's own); wsum (Q8_0): per block and row, -128 sum(w).
template <class P, bool kQ8, int T>
void Tile(const int8_t* codes, const float* wscale, const int32_t* wsum, int64_t nb,
          const uint8_t* const* xq, const float* const* xs, const int32_t* const* base, float* y,
          int64_t ldy, int rows) {
  using IV = typename P::IV;
  using FV = typename P::FV;
  FV acc[T];
  for (int j = 0; j < T; ++j) acc[j] = P::ZeroF();
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* wb = codes + b * kBlockBytes;
    IV sum[T];
    for (int j = 0; j < T; ++j) {
      if constexpr (kQ8) {
        sum[j] = P::LoadI(wsum + b * kRows);
      } else {
        sum[j] = P::SplatI(base[j][b]);
      }
    }
    for (int g = 0; g < 8; ++g) {
      const IV w = P::LoadI(wb + g * 4 * kRows);
      for (int j = 0; j < T; ++j) {
        const IV x = P::Bcast4(xq[j] + b * kQK + 4 * g);
        sum[j] = kQ8 ? P::Dot4(sum[j], x, w) : P::Dot4(sum[j], w, x);
      }
    }
    const FV wd = P::LoadF(wscale + b * kRows);
    for (int j = 0; j < T; ++j) {
      acc[j] = P::Fma(P::CvtF(sum[j]), P::MulF(wd, P::SplatF(xs[j][b])), acc[j]);
    }
  }
  for (int j = 0; j < T; ++j) P::StoreFirstF(y + j * ldy, acc[j], rows);
}

template <class P, bool kQ8>
void QuantBlockedOf(const MatmulTask& t, TensorType type) {
  const int64_t nb = t.k / kQK;
  const int64_t tb = EqualTokenBlock(t.n, t.x_stride, kTile);
  // Scratch: panel codes (nb * 512 bytes) | row scales (nb * 16) | -128 sum(w) (nb * 16) |
  // token codes (tb * nb * 32 bytes) | token scales (tb * nb) | token bases (tb * nb).
  auto* codes = reinterpret_cast<int8_t*>(t.scratch);
  float* wscale = t.scratch + nb * kBlockBytes / 4;
  auto* wsum = reinterpret_cast<int32_t*>(wscale + nb * kRows);
  auto* xq = reinterpret_cast<uint8_t*>(wsum + nb * kRows);
  float* xs = reinterpret_cast<float*>(xq + tb * nb * kQK);
  auto* xbase = reinterpret_cast<int32_t*>(xs + tb * nb);
  const typename P::IV ones = P::SplatI(0x01010101);
  for (int64_t i0 = 0; i0 < t.n; i0 += tb) {
    const int64_t i1 = t.n - i0 < tb ? t.n : i0 + tb;
    for (int64_t i = i0; i < i1; ++i) {
      const auto* a = reinterpret_cast<const BlockQ8_0*>(t.x + i * t.x_stride);
      uint8_t* q = xq + (i - i0) * nb * kQK;
      for (int64_t b = 0; b < nb; ++b) {
        xs[(i - i0) * nb + b] = Fp16ToFloat(a[b].d);
        int32_t sx = 0;
        for (int e = 0; e < kQK; ++e) {
          q[b * kQK + e] = static_cast<uint8_t>(a[b].qs[e] + (kQ8 ? 128 : 0));
          sx += a[b].qs[e];
        }
        xbase[(i - i0) * nb + b] = -8 * sx;
      }
    }
    for (int64_t r = t.r0; r < t.r1; r += kRows) {
      const int rows = static_cast<int>(t.r1 - r < kRows ? t.r1 - r : kRows);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* src[8];
        PanelHalfRows<P>(t, r, rows, half, src);
        ExpandQuantRows8(type, src, nb, codes + 32 * half, kBlockBytes, wscale + 8 * half, kRows);
      }
      if constexpr (kQ8) {
        for (int64_t b = 0; b < nb; ++b) {
          typename P::IV s = P::SplatI(0);
          for (int g = 0; g < 8; ++g)
            s = P::Dot4(s, ones, P::LoadI(codes + b * kBlockBytes + g * 64));
          P::StoreI(wsum + b * kRows, s);
          for (int l = 0; l < kRows; ++l) wsum[b * kRows + l] *= -128;
        }
      }
      for (int64_t i = i0; i < i1; i += kTile) {
        const uint8_t* tq[kTile];
        const float* ts[kTile];
        const int32_t* tbase[kTile];
        const int64_t count = i1 - i < kTile ? i1 - i : kTile;
        for (int j = 0; j < count; ++j) {
          tq[j] = xq + (i - i0 + j) * nb * kQK;
          ts[j] = xs + (i - i0 + j) * nb;
          tbase[j] = xbase + (i - i0 + j) * nb;
        }
        float* y = t.y + i * t.ldy + r;
        WithWidth<kTile>(count, [&]<int T>() {
          Tile<P, kQ8, T>(codes, wscale, wsum, nb, tq, ts, tbase, y, t.ldy, rows);
        });
      }
    }
  }
}

template <class P>
void QuantBlocked(const MatmulTask& t, TensorType type) {
  if (type == TensorType::kQ8_0 || type == TensorType::kQ5_0 || type == TensorType::kIQ4_NL ||
      type == TensorType::kIQ4_XS) {  // signed codes
    QuantBlockedOf<P, true>(t, type);
  } else {
    QuantBlockedOf<P, false>(t, type);
  }
}

inline constexpr int64_t kKBlockBytes = kRows * kQKK;  // one super-block of a K panel
inline constexpr int kKTile = 8;                       // tokens per K-quant tile

// One K-quant tile: the panel's 16 rows x T tokens (see KQuantBlocked for the panel).
template <class P, bool kHasMin, int T>
void KTile(const uint8_t* codes, const int32_t* scales, const int32_t* mins, const float* wd,
           const float* wdmin, int64_t nb, const BlockQ8K* const* x, float* y, int64_t ldy,
           int rows) {
  using IV = typename P::IV;
  using FV = typename P::FV;
  FV acc[T];
  for (int c = 0; c < T; ++c) acc[c] = P::ZeroF();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = codes + b * kKBlockBytes;
    IV isum[T];
    for (int c = 0; c < T; ++c) isum[c] = P::SplatI(0);
    for (int sb = 0; sb < 16; ++sb) {  // 16-element sub-blocks: 4 groups each
      IV part[T];
      for (int c = 0; c < T; ++c) part[c] = P::SplatI(0);
      for (int g = 4 * sb; g < 4 * sb + 4; ++g) {
        const IV w = P::LoadI(wb + g * 4 * kRows);
        for (int c = 0; c < T; ++c) part[c] = P::Dot4(part[c], w, P::Bcast4(x[c][b].qs + 4 * g));
      }
      const IV scale = P::LoadI(scales + (b * 16 + sb) * kRows);
      for (int c = 0; c < T; ++c) isum[c] = P::AddI(isum[c], P::MulLoI(part[c], scale));
    }
    const FV d = P::LoadF(wd + b * kRows);
    for (int c = 0; c < T; ++c) {
      IV m = P::SplatI(0);
      for (int i = 0; i < 8; ++i) {
        m = P::Dot2(m, P::LoadI(mins + (b * 8 + i) * kRows), P::Bcast4(x[c][b].bsums + 2 * i));
      }
      const FV dx = P::SplatF(x[c][b].d);
      if constexpr (kHasMin) {
        acc[c] = P::Fma(P::CvtF(isum[c]), P::MulF(d, dx), acc[c]);
        acc[c] = P::Fnma(P::CvtF(m), P::MulF(P::LoadF(wdmin + b * kRows), dx), acc[c]);
      } else {
        acc[c] = P::Fma(P::CvtF(P::SubI(isum[c], m)), P::MulF(d, dx), acc[c]);
      }
    }
  }
  for (int c = 0; c < T; ++c) P::StoreFirstF(y + c * ldy, acc[c], rows);
}

template <class P, bool kHasMin>
void KQuantBlockedOf(const MatmulTask& t, TensorType type) {
  const int64_t nb = t.k / kQKK;
  const int64_t tb = EqualTokenBlock(t.n, t.x_stride, kKTile);
  // Scratch: codes (nb * 4096 bytes) | scales (nb * 16 * 16) | min pairs (nb * 8 * 16) |
  // d (nb * 16) | dmin (nb * 16).
  auto* codes = reinterpret_cast<uint8_t*>(t.scratch);
  auto* scales = reinterpret_cast<int32_t*>(codes + nb * kKBlockBytes);
  int32_t* mins = scales + nb * 16 * kRows;
  auto* wd = reinterpret_cast<float*>(mins + nb * 8 * kRows);
  float* wdmin = wd + nb * kRows;
  auto xrow = [&](int64_t i) { return reinterpret_cast<const BlockQ8K*>(t.x + i * t.x_stride); };
  for (int64_t i0 = 0; i0 < t.n; i0 += tb) {
    const int64_t i1 = t.n - i0 < tb ? t.n : i0 + tb;
    for (int64_t r = t.r0; r < t.r1; r += kRows) {
      const int rows = static_cast<int>(t.r1 - r < kRows ? t.r1 - r : kRows);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* src[8];
        PanelHalfRows<P>(t, r, rows, half, src);
        const KRows8Out out{codes + 32 * half, kKBlockBytes,  4 * kRows,        scales + 8 * half,
                            mins + 8 * half,   wd + 8 * half, wdmin + 8 * half, kRows};
        ExpandKQuantRows8(type, src, nb, out);
      }
      for (int64_t i = i0; i < i1; i += kKTile) {
        const BlockQ8K* x[kKTile];
        const int64_t count = i1 - i < kKTile ? i1 - i : kKTile;
        for (int c = 0; c < count; ++c) x[c] = xrow(i + c);
        float* y = t.y + i * t.ldy + r;
        WithWidth<kKTile>(count, [&]<int T>() {
          KTile<P, kHasMin, T>(codes, scales, mins, wd, wdmin, nb, x, y, t.ldy, rows);
        });
      }
    }
  }
}

template <class P>
void KQuantBlocked(const MatmulTask& t, TensorType type) {
  if (type == TensorType::kQ6_K) {
    KQuantBlockedOf<P, false>(t, type);
  } else {
    KQuantBlockedOf<P, true>(t, type);
  }
}

}  // namespace cascade::cpu::dot16

#endif  // CASCADE_KERNELS_CPU_QUANT_LANES_H_
