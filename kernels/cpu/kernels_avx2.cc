// AVX2 + FMA + F16C kernels for float activations (F32/F16/BF16 weights, and quantized
// weights dequantized exactly), the vector helpers, and the AVX2 kernel table. Compiled
// with -mavx2 -mfma -mf16c; only reached after run-time detection says the CPU has them.
// Reduction orders follow kernel_table.h: every output element has its own 8-lane FMA
// accumulator over k in element order, reduced by Hsum8, whatever the tile shape.
//
// Decode (few tokens) streams the weights once, converting them in registers; prefill
// (gemm_lanes.h's LaneGemm with 8-float vectors) packs a block of tokens and panels of 16
// weight rows (converted to F32 once per token block, thread-local scratch) lane by lane
// and runs 16 x 6 outer-product tiles.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_grouped.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/gemm_lanes.h"
#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/grouped_token.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/prefetch.h"
#include "tensor/quant.h"

namespace cascade::cpu {
namespace {

using avx2::Hsum8;
using avx2::TailMask;

// Float matmuls: up to kDirectMaxTokens tokens stream each weight row once, converting it
// in registers (F32Direct); up to kGemmMinTokens - 1, in passes of at most
// kDirectMaxTokens tokens over chunks of kPassRows rows (the later passes re-read the rows
// from L2); from kGemmMinTokens on, the GEMM packs activations and weight panels. Measured
// on Zen 3, F16 5632 x 2048 at 8 tokens: passes 37-45 GFLOP/s, GEMM 24 (8 tokens fill
// 1.3 of its 6-token tiles and it pays a transposing weight pack per 8 products).
constexpr int64_t kDirectMaxTokens = 5;
constexpr int64_t kPassRows = 64;
// Decode prefetches the weights this many rows ahead into L2 (one prefetch per 64 bytes
// of each row). The hardware prefetcher alone did not keep the bus busy when rows are
// short. Measured with this table on Zen 4 when the one-token tile read 8 rows at a time
// (kernel_bench BM_DecodeLayers, F16, one thread, GiB/s): 768-wide layers 11.0-12.6
// without -> 19.2-22.3 with 16 rows ahead into L2; 2048-wide 20.6-22.4 -> 21.8-22.6. Into
// L1 instead: 12.1-13.2 and 17.4-19.0 (on Zen 3, 8 or 16 rows ahead into L1 had lost 5-15%
// at 2048), so L2 it is. (The two-row tile keeps the 16 rows; not measured again without.)
constexpr int64_t kDecodePrefetchRows = 16;
// With 2-5 tokens the tiles hold only 2-6 rows: prefetch the rows this many tiles ahead,
// into L2 as well (measured on Zen 3, F16 x 4 tokens: +18% over hardware prefetch alone;
// on Zen 4, 2 tokens: +35-45% into L2 over L1).
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
      for (int r = 0; r < R; ++r) {
        PrefetchBytes<CacheLevel::kL2>(reinterpret_cast<const char*>(w[r]) + e * L::kBytes + pf,
                                       64);
      }
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

// Few tokens (1 <= n <= kDirectMaxTokens): stream each weight row once, converting in
// registers. Tiles hold R x T accumulators plus T activation vectors and one weight vector
// in the 16 ymm registers. kOneTokenRows: the rows of a one-token tile (2 or 8, see
// OneTokenFloatRows). kFromMemory: the rows stream from memory (the weights in place,
// prefetched); false: they are in cache (dequantized into scratch). The tile shape changes
// no result.
template <typename L, int kOneTokenRows, bool kFromMemory = true>
void F32Direct(const MatmulTask& t) {
  static_assert(kDirectMaxTokens == 5, "F32Direct has tiles for 1 to 5 tokens");
  static_assert(kOneTokenRows == 2 || kOneTokenRows == 8, "one-token tiles of 2 or 8 rows");
  int64_t r = t.r0;
  switch (t.n) {
    case 1:
      if constexpr (kFromMemory) {
        F32AllTokens<L, kOneTokenRows, 1>(t, &r, kDecodePrefetchRows * t.w_stride);
      } else {
        F32AllTokens<L, kOneTokenRows, 1>(t, &r);
      }
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
    default:  // more tokens: F32FewTokens's passes of these tiles, or the GEMM
      return;
  }
}

// Many tokens (GEMM, gemm_lanes.h). The lane order above makes each output's eight lane
// sums independent chains of FMAs over the steps s (element 8 * s + lane), so the GEMM runs
// as eight matrix products of depth kp / 8, one per lane, each with the classic
// outer-product register tile (16 weight rows in two vectors x 6 tokens broadcast one at a
// time: 2 loads and 6 broadcasts per 12 FMAs), then adds each output's eight lane sums in
// Hsum8's tree. Same FMAs in the same order as F32Tile, so the same bits; only the data
// layout changes. Each lane's weights are swept in sub-panels of kGemmChunkSteps steps (8
// KiB, kept in L1) by every token tile, whose activations (3 KiB) stream from L2. Measured
// on Zen 3: 16 x 6 tiles beat 24 x 4, and 128-step sub-panels beat 256 and 512.
struct Ymm {
  static constexpr int kWidth = 8;
  static constexpr bool kPairTiles = false;  // 16 registers: one 12-accumulator tile
  using V = __m256;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void StoreFirst(float* p, V v, int count) { _mm256_maskstore_ps(p, TailMask(count), v); }
  static V Splat(const float* p) { return _mm256_broadcast_ss(p); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
};

// Loads elements [8 * s, 8 * s + 8) of a row through L (zeros past k, or for no row).
template <typename L>
inline __m256 LoadStep(const uint8_t* row, int64_t s, int64_t k) {
  if (row == nullptr) return _mm256_setzero_ps();
  const int64_t e = 8 * s;
  return e + 8 <= k ? L::Load8(row, e) : L::LoadPartial(row, e, k - e);
}

// Packs 8 rows lane-major: out[at.At(lane, s) + q] = row q's element 8 * s + lane, writing
// the first kWidth (6: a token tile, or 8: weight rows) of the 8 row slots; the rows past
// kWidth are not read, a null row among the first packs zeros. The layout is copied into
// locals and each chunk's lane pointers advance by a slot per step; the steps whose 8
// elements all lie in k, of rows that all exist, load without a check. (perf of BM_MatMul
// F16 n:128, Zen 4: written with a layout lookup per store and a checked load per row,
// packing took 9% of the matmul, most of it reloading the layout after every store, which
// may alias it.)
template <typename L, int kWidth>
void PackLaneMajor(const uint8_t* const* rows_in, int64_t k, int64_t steps, float* out,
                   const LaneLayout& at_in) {
  static_assert(kWidth == 6 || kWidth == 8);
  const LaneLayout at = at_in;
  const uint8_t* rows[8] = {};
  bool all = true;
  for (int q = 0; q < kWidth; ++q) {
    rows[q] = rows_in[q];
    all = all && rows[q] != nullptr;
  }
  const __m256i keep = TailMask(kWidth);
  const int64_t checked = all ? k / 8 : 0;  // steps before this one load without a check
  for (int64_t c0 = 0; c0 < steps; c0 += kGemmChunkSteps) {
    const int64_t c1 = std::min(steps, c0 + kGemmChunkSteps);
    float* dst = out + c0 / kGemmChunkSteps * at.chunk_floats;
    for (int64_t s = c0; s < c1; ++s, dst += at.slot) {
      __m256i v[8] = {}, o[8];
      if (s < checked) {
        for (int q = 0; q < kWidth; ++q) v[q] = _mm256_castps_si256(L::Load8(rows[q], 8 * s));
      } else {
        for (int q = 0; q < kWidth; ++q) v[q] = _mm256_castps_si256(LoadStep<L>(rows[q], s, k));
      }
      avx2::Transpose8x8(v, o);
      float* d = dst;
      for (int j = 0; j < 8; ++j, d += at.lane_floats) {
        if constexpr (kWidth == 8) {
          _mm256_storeu_ps(d, _mm256_castsi256_ps(o[j]));
        } else {
          _mm256_maskstore_ps(d, keep, _mm256_castsi256_ps(o[j]));
        }
      }
    }
  }
}

// Packs tile `tile` of block b of g into the block's packed activations `out`.
void PackGemmTile(const MatmulTask& t, const GemmBlocks& g, int64_t b, int64_t tile, float* out) {
  const uint8_t* rows[8] = {};
  for (int c = 0; c < kGemmTokens && tile * kGemmTokens + c < g.Count(b); ++c) {
    rows[c] = t.x + (b * g.nb + tile * kGemmTokens + c) * t.x_stride;
  }
  PackLaneMajor<LoadF32, kGemmTokens>(rows, g.k, g.steps, out + tile * kTileChunk, g.XLayout(b));
}

// Fewer than kGemmMinTokens tokens: F32Direct, or its tiles in passes of equal token
// groups (2 or 3), all of them over one chunk of kPassRows rows before the next.
template <typename L, int kOneTokenRows, bool kFromMemory = true>
void F32FewTokens(const MatmulTask& t) {
  if (t.n <= kDirectMaxTokens) {
    F32Direct<L, kOneTokenRows, kFromMemory>(t);
    return;
  }
  const int64_t passes = (t.n + kDirectMaxTokens - 1) / kDirectMaxTokens;
  for (int64_t r = t.r0; r < t.r1; r += kPassRows) {
    int64_t i = 0;
    for (int64_t p = 0; p < passes; ++p) {
      MatmulTask s = t;
      s.n = (t.n - i) / (passes - p);
      s.x = t.x + i * t.x_stride;
      s.y = t.y + i * t.ldy;
      s.r0 = r;
      s.r1 = std::min(t.r1, r + kPassRows);
      F32Direct<L, kOneTokenRows, kFromMemory>(s);
      i += s.n;
    }
  }
}

template <typename L, TensorType kType, int kOneTokenRows>
void MatmulF32Act(const MatmulTask& t) {
  if (t.n < kGemmMinTokens) {
    F32FewTokens<L, kOneTokenRows>(t);
  } else {
    lanes::LaneGemm<Ymm>(t, kType);
  }
}

// Quantized weights, float activations (exact mode): few tokens dequantize chunks of
// kDequantRows rows into scratch and run the float tiles over them (a 1-token matmul would
// otherwise fill a 6-token GEMM tile); more go to the GEMM, which dequantizes its panels.
constexpr int64_t kDequantRows = 32;
static_assert(kDequantRows <= kScratchRowsPerElement, "dequantized rows fit in scratch");

template <TensorType kType>
void MatmulDequantF32(const MatmulTask& t) {
  if (t.n >= kGemmMinTokens) {
    lanes::LaneGemm<Ymm, true>(t, kType);
    return;
  }
  const int64_t kp = (t.k + 7) / 8 * 8;
  for (int64_t r = t.r0; r < t.r1; r += kDequantRows) {
    const int64_t rows = std::min(kDequantRows, t.r1 - r);
    for (int64_t q = 0; q < rows; ++q) {
      DequantizeRow(kType, t.w + (r + q) * t.w_stride, t.k, t.scratch + q * kp);
    }
    MatmulTask s = t;
    s.w = reinterpret_cast<const uint8_t*>(t.scratch);
    s.w_stride = static_cast<size_t>(kp) * sizeof(float);
    s.y = t.y + r;
    s.r0 = 0;
    s.r1 = rows;
    // Rows in scratch, in cache: one token needs more FMA chains than two rows give to
    // keep the FMA units busy.
    F32FewTokens<LoadF32, 8, false>(s);
  }
}

size_t PackedF32Floats(TensorType /*type*/, int64_t n, int64_t k) {
  if (n < kGemmMinTokens) return 0;  // F32FewTokens packs no activations
  const GemmBlocks g(n, k);
  return static_cast<size_t>(g.blocks * g.BlockFloats());
}

void PackF32(TensorType /*type*/, const MatmulTask& t, int part, int parts, float* out) {
  const GemmBlocks g(t.n, t.k);
  const int64_t per_block = g.nb / kGemmTokens, slots = g.blocks * per_block;
  const int64_t begin = slots * part / parts, end = slots * (part + 1) / parts;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t b = i / per_block, tile = i % per_block;
    if (tile < g.Tiles(b)) PackGemmTile(t, g, b, tile, out + b * g.BlockFloats());
  }
}

template <int kOneTokenRows>
MatmulFn FloatWeights(TensorType type) {
  switch (type) {
    case TensorType::kF32:
      return &MatmulF32Act<LoadF32, TensorType::kF32, kOneTokenRows>;
    case TensorType::kF16:
      return &MatmulF32Act<LoadF16, TensorType::kF16, kOneTokenRows>;
    case TensorType::kBF16:
      return &MatmulF32Act<LoadBF16, TensorType::kBF16, kOneTokenRows>;
    default:
      return nullptr;
  }
}

MatmulFn Avx2Matmul(TensorType type, ActFormat act) {
  if (act == ActFormat::kF32) {
    static const int one_token_rows = OneTokenFloatRows(DetectCpuFeatures());
    if (MatmulFn f = Avx2FloatMatmul(type, one_token_rows)) return f;
    return ForQuantizedType(
        type, [](auto t) -> MatmulFn { return &MatmulDequantF32<decltype(t)::value>; });
  }
  if (act == ActFormat::kQ8_0) {
    if (MatmulFn f = avx2::QuantMatmul(type)) return f;
    return avx2::LegacyQuantMatmul(type);
  }
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

int OneTokenFloatRows(const CpuFeatures& cpu) { return cpu.zen4() ? 2 : 8; }

bool PrefetchGroupedQ4K(const CpuFeatures& cpu) { return !cpu.zen4(); }

MatmulFn Avx2FloatMatmul(TensorType type, int one_token_rows) {
  return one_token_rows == 8 ? FloatWeights<8>(type) : FloatWeights<2>(type);
}

void PackGemmActivationBlock(const MatmulTask& t, int64_t b, float* out) {
  const GemmBlocks g(t.n, t.k);
  for (int64_t tile = 0; tile < g.Tiles(b); ++tile) PackGemmTile(t, g, b, tile, out);
}

void PackGemmWeightRows(TensorType type, const uint8_t* const* rows, int64_t k, float* out,
                        const LaneLayout& at) {
  const int64_t steps = (k + 7) / 8;
  switch (type) {
    case TensorType::kF32:
      PackLaneMajor<LoadF32, 8>(rows, k, steps, out, at);
      return;
    case TensorType::kF16:
      PackLaneMajor<LoadF16, 8>(rows, k, steps, out, at);
      return;
    case TensorType::kBF16:
      PackLaneMajor<LoadBF16, 8>(rows, k, steps, out, at);
      return;
    default:
      return;  // the contract allows only the float types
  }
}

const KernelTable& Avx2Kernels() {
  static const KernelTable table = [] {
    KernelTable t{.isa = CpuIsa::kAvx2,
                  .matmul = &Avx2Matmul,
                  .quantize_q8_0 = &avx2::QuantizeQ8_0Row,
                  .quantize_q8k = &avx2::QuantizeQ8KRow,
                  .dot = &avx2::Dot,
                  .axpy = &Axpy,
                  .scale = &avx2::Scale,
                  .sum_squares = &SumSquares,
                  .silu_mul = &avx2::SiluMul,
                  .gelu_mul = &avx2::GeluMul,
                  .float_to_f16 = &avx2::FloatRowToHalf,
                  .attention_group = &avx2::AttentionGroup,
                  .packed_f32_floats = &PackedF32Floats,
                  .pack_f32 = &PackF32};
    t.groups = &avx2::GroupsType;
    t.grouped_tokens_bytes = &GroupedTokensBytes;
    t.prepare_grouped = &PrepareGroupedTokens;
    t.grouped_matmul = avx2::GroupedMatmulFor(PrefetchGroupedQ4K(DetectCpuFeatures()));
    return t;
  }();
  return table;
}

}  // namespace cascade::cpu
