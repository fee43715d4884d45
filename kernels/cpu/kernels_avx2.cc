// AVX2 + FMA + F16C kernels for float activations (F32/F16/BF16 weights, and quantized
// weights dequantized exactly), the vector helpers, and the AVX2 kernel table. Compiled
// with -mavx2 -mfma -mf16c; only reached after run-time detection says the CPU has them.
// Reduction orders follow kernel_table.h: every output element has its own 8-lane FMA
// accumulator over k in element order, reduced by Hsum8, whatever the tile shape.
//
// Decode (few tokens) streams the weights once, converting them in registers; prefill
// blocks the tokens so that their activations stay in L2, converts a panel of 4 weight
// rows to F32 once per token block (thread-local scratch), and runs 4 x 3 register tiles.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/kernel_table.h"
#include "model/quant.h"

namespace cascade::cpu {
namespace {

using avx2::Hsum8;
using avx2::TailMask;

// From this many tokens on, float matmuls convert weight panels once and block tokens.
constexpr int64_t kPanelMinTokens = 6;
// Decode prefetches weights this many rows ahead (0: hardware prefetch only). Measured on
// Zen 3: the light F16/BF16/F32 decode loop streams best with the hardware prefetcher
// alone (8 or 16 rows ahead lost 5-15%), unlike the heavier quantized kernels.
constexpr int64_t kDecodePrefetchRows = 0;
// With 2-5 tokens the tiles hold only 2-6 rows: too few page-sized row streams for the
// hardware prefetcher to keep the bus busy, so prefetch the rows this many tiles ahead
// (measured on Zen 3, F16 x 4 tokens: +18% over hardware prefetch alone).
constexpr int64_t kFewPrefetchTiles = 4;

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 Load8(const uint8_t* row, int64_t e) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
  }
  static __m256 LoadPartial(const uint8_t* row, int64_t e, int64_t count) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + e, TailMask(count));
  }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 Load8(const uint8_t* row, int64_t e) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * e)));
  }
  static __m256 LoadPartial(const uint8_t* row, int64_t e, int64_t count) {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, row + 2 * e, 2 * count);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
  }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m256 Load8(const uint8_t* row, int64_t e) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * e));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static __m256 LoadPartial(const uint8_t* row, int64_t e, int64_t count) {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, row + 2 * e, 2 * count);
    __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};
// One R x T tile: rows w[0..R) (loaded through L), activation rows x[0..T).
template <typename L, int R, int T>
inline void F32Tile(const uint8_t* const* w, const float* const* x, int64_t k, float* y,
                    int64_t ldy, int64_t pf = 0) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < T; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  auto step = [&](int64_t e) {
    __m256 xv[T];
    for (int c = 0; c < T; ++c) xv[c] = _mm256_loadu_ps(x[c] + e);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = L::Load8(w[r], e);
      for (int c = 0; c < T; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  };
  int64_t e = 0;
  // Two steps per iteration: the same order, more loads in flight (decode streams faster).
  for (; e + 16 <= k; e += 16) {
    if (pf != 0 && e % (64 / L::kBytes) == 0) {  // one prefetch per 64 bytes of each row
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w[r]) + e * L::kBytes + pf, _MM_HINT_T0);
    }
    step(e);
    step(e + 8);
  }
  for (; e + 8 <= k; e += 8) step(e);
  if (e < k) {
    const int64_t rem = k - e;
    __m256 xv[T];
    for (int c = 0; c < T; ++c) xv[c] = _mm256_maskload_ps(x[c] + e, TailMask(rem));
    for (int r = 0; r < R; ++r) {
      const __m256 wv = L::LoadPartial(w[r], e, rem);
      for (int c = 0; c < T; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < T; ++c) y[c * ldy + r] = Hsum8(acc[r][c]);
  }
}

// One R x T tile over packed panels: wp holds [kp / 8][R][8] weights, xp [kp / 8][T][8]
// activations (k zero-padded to kp, which adds the same fma(0, 0, acc) as F32Tile's masked
// tail). Steps [s0, s1) of 8 elements continue the accumulators saved in
// part[(c * R + r) * 8] (zero when s0 == 0) and save them again, or, when s1 is the last
// step, reduce them into y (rows [0, rows) only). Each accumulator sees exactly the FMAs
// of F32Tile, in the same order.
template <int R, int T>
inline void PackedTile(const float* wp, const float* xp, int64_t s0, int64_t s1, bool last,
                       float* part, float* y, int64_t ldy, int rows) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < T; ++c) {
      acc[r][c] = s0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(part + (c * R + r) * 8);
    }
  }
  const float* wq = wp + s0 * R * 8;
  const float* xq = xp + s0 * T * 8;
  for (int64_t s = s0; s < s1; ++s, wq += R * 8, xq += T * 8) {
    __m256 xv[T];
    for (int c = 0; c < T; ++c) xv[c] = _mm256_load_ps(xq + c * 8);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_load_ps(wq + r * 8);
      for (int c = 0; c < T; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  if (!last) {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < T; ++c) _mm256_store_ps(part + (c * R + r) * 8, acc[r][c]);
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < T; ++c) y[c * ldy + r] = Hsum8(acc[r][c]);
  }
}

// Packs `count` rows (count <= N; missing rows are zeros) as [kp / 8][N][8], converting
// through L.
template <typename L, int N>
void PackRows(const uint8_t* const* rows, int count, int64_t k, float* out) {
  const int64_t steps = (k + 7) / 8;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t e = 8 * s;
    for (int j = 0; j < N; ++j) {
      __m256 v = _mm256_setzero_ps();
      if (j < count) v = e + 8 <= k ? L::Load8(rows[j], e) : L::LoadPartial(rows[j], e, k - e);
      _mm256_store_ps(out + (s * N + j) * 8, v);
    }
  }
}

// Rows [*r, t.r1) in steps of R against all T == t.n activation rows at once, so every
// weight row is read and converted exactly once; leaves *r at the first row not done.
template <typename L, int R, int T>
void F32AllTokens(const MatmulTask& t, int64_t* r, int64_t pf = 0) {
  const float* x[T];
  for (int c = 0; c < T; ++c) x[c] = reinterpret_cast<const float*>(t.x + c * t.x_stride);
  const uint8_t* w[R];
  for (; *r + R <= t.r1; *r += R) {
    for (int j = 0; j < R; ++j) w[j] = t.w + (*r + j) * t.w_stride;
    F32Tile<L, R, T>(w, x, t.k, t.y + *r, t.ldy, pf);
  }
  for (; *r < t.r1; ++*r) {
    w[0] = t.w + *r * t.w_stride;
    F32Tile<L, 1, T>(w, x, t.k, t.y + *r, t.ldy);
  }
}

// Few tokens (1 <= n < kPanelMinTokens): stream each weight row once, converting in
// registers. Tiles hold R x T accumulators plus T activation vectors and one weight vector
// in the 16 ymm registers.
template <typename L>
void F32Direct(const MatmulTask& t) {
  static_assert(kPanelMinTokens == 6, "F32Direct has tiles for 1 to 5 tokens");
  int64_t r = t.r0;
  switch (t.n) {
    case 1:  // decode: more rows in flight to hide FMA latency
      F32AllTokens<L, 8, 1>(t, &r, kDecodePrefetchRows * t.w_stride);
      return;
    case 2:
      F32AllTokens<L, 6, 2>(t, &r, kFewPrefetchTiles * 6 * t.w_stride);
      return;
    case 3:
      F32AllTokens<L, 4, 3>(t, &r, kFewPrefetchTiles * 4 * t.w_stride);
      return;
    case 4:
      F32AllTokens<L, 2, 4>(t, &r, kFewPrefetchTiles * 2 * t.w_stride);
      return;
    case 5:
      F32AllTokens<L, 2, 5>(t, &r, kFewPrefetchTiles * 2 * t.w_stride);
      return;
    default:  // n >= kPanelMinTokens goes to F32Gemm (MatmulF32Act)
      return;
  }
}

// Many tokens (GEMM): token blocks of packed activations (up to 1 MiB); per block, panels
// of R weight rows converted to F32 and packed once (thread-local scratch), then swept in
// chunks of kChunk elements (8 KiB of panel, resident in L1) by every R x T tile, while
// the next panel's weights are prefetched.
// Scratch: [R * kp panel][R * kp dequantized rows][packed tokens][partial accumulators].
template <typename L, bool kDequant = false, TensorType kType = TensorType::kF32>
void F32Gemm(const MatmulTask& t) {
  constexpr int R = 4, T = 3;
  constexpr int64_t kChunk = 512;
  const int64_t kp = (t.k + 7) / 8 * 8, steps = kp / 8, chunk_steps = kChunk / 8;
  // Token blocks of up to 1 MiB of packed activations (L3; each tile's chunk streams
  // sequentially): fewer blocks mean fewer re-packs of each weight panel.
  const int64_t nb_max =
      std::min<int64_t>(255 / T * T, std::max<int64_t>(T, (int64_t{1} << 18) / kp / T * T));
  const int64_t blocks = (t.n + nb_max - 1) / nb_max;  // equal blocks, multiples of T
  const int64_t nb = std::min(nb_max, ((t.n + blocks - 1) / blocks + T - 1) / T * T);
  float* wp = t.scratch;
  float* deq = wp + R * kp;
  float* xp = deq + R * kp;
  float* part = xp + std::max<int64_t>(nb, T) * kp;  // (nb, R, 8)
  auto xrow = [&](int64_t j) { return t.x + j * t.x_stride; };
  for (int64_t i0 = 0; i0 < t.n; i0 += nb) {
    const int64_t i1 = std::min(t.n, i0 + nb);
    const int64_t full = (i1 - i0) / T * T;  // tokens in T-tiles; the rest in 1-token tiles
    for (int64_t i = 0; i < i1 - i0; i += (i < full ? T : 1)) {
      const uint8_t* rows[T];
      const int count = i < full ? T : 1;
      for (int c = 0; c < count; ++c) rows[c] = xrow(i0 + i + c);
      if (count == T) {
        PackRows<LoadF32, T>(rows, T, t.k, xp + i * kp);
      } else {
        PackRows<LoadF32, 1>(rows, 1, t.k, xp + i * kp);
      }
    }
    for (int64_t r = t.r0; r < t.r1; r += R) {
      const int count = static_cast<int>(std::min<int64_t>(R, t.r1 - r));
      const uint8_t* src[R];
      for (int j = 0; j < count; ++j) {
        src[j] = t.w + (r + j) * t.w_stride;
        if constexpr (kDequant) {
          DequantizeRow(kType, src[j], t.k, deq + j * kp);
          src[j] = reinterpret_cast<const uint8_t*>(deq + j * kp);
        }
      }
      PackRows<L, R>(src, count, t.k, wp);
      // Meanwhile bring the next panel's weights in, a few lines per tile.
      const char* next = reinterpret_cast<const char*>(t.w + (r + R) * t.w_stride);
      const int64_t next_lines =
          r + R < t.r1 ? (R * static_cast<int64_t>(t.w_stride) + 63) / 64 : 0;
      const int64_t tiles = full / T + (i1 - i0 - full);
      const int64_t per_tile = (next_lines + tiles - 1) / tiles;
      int64_t prefetched = 0;
      for (int64_t s0 = 0; s0 < steps; s0 += chunk_steps) {
        const int64_t s1 = std::min(steps, s0 + chunk_steps);
        const bool last = s1 == steps;
        for (int64_t i = 0; i < i1 - i0; i += (i < full ? T : 1)) {
          for (int64_t q = 0; q < per_tile && prefetched < next_lines; ++q, ++prefetched) {
            _mm_prefetch(next + 64 * prefetched, _MM_HINT_T1);
          }
          float* y = t.y + (i0 + i) * t.ldy + r;
          if (i < full) {
            PackedTile<R, T>(wp, xp + i * kp, s0, s1, last, part + i * R * 8, y, t.ldy, count);
          } else {
            PackedTile<R, 1>(wp, xp + i * kp, s0, s1, last, part + i * R * 8, y, t.ldy, count);
          }
        }
      }
    }
  }
}

template <typename L>
void MatmulF32Act(const MatmulTask& t) {
  if (t.n < kPanelMinTokens) {
    F32Direct<L>(t);
  } else {
    F32Gemm<L>(t);
  }
}

template <TensorType kType>
void MatmulDequantF32(const MatmulTask& t) {
  F32Gemm<LoadF32, true, kType>(t);
}

MatmulFn Avx2Matmul(TensorType type, ActFormat act) {
  if (act == ActFormat::kF32) {
    switch (type) {
      case TensorType::kF32:
        return &MatmulF32Act<LoadF32>;
      case TensorType::kF16:
        return &MatmulF32Act<LoadF16>;
      case TensorType::kBF16:
        return &MatmulF32Act<LoadBF16>;
      case TensorType::kQ4_0:
        return &MatmulDequantF32<TensorType::kQ4_0>;
      case TensorType::kQ8_0:
        return &MatmulDequantF32<TensorType::kQ8_0>;
      case TensorType::kQ4_K:
        return &MatmulDequantF32<TensorType::kQ4_K>;
      case TensorType::kQ5_K:
        return &MatmulDequantF32<TensorType::kQ5_K>;
      case TensorType::kQ6_K:
        return &MatmulDequantF32<TensorType::kQ6_K>;
      default:
        return nullptr;
    }
  }
  if (act == ActFormat::kQ8_0) return avx2::QuantMatmul(type);
  return avx2::KQuantMatmul(type);
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

float SumSquares(const float* x, int64_t n) { return avx2::Dot(x, x, n); }

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table{
      CpuIsa::kAvx2, &Avx2Matmul, &avx2::QuantizeQ8_0Row, &avx2::QuantizeQ8KRow, &avx2::Dot, &Axpy,
      &avx2::Scale,  &SumSquares, &avx2::SiluMul,         &avx2::AttentionGroup};
  return table;
}

}  // namespace cascade::cpu
