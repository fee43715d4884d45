// Internal: the 16-row group layout of Q8_0 / Q4_0 / Q4_K weights
// (WeightLayout::kRowGroups16), made once at load time by CpuBackend::UploadWeight where the CPU
// has a kernel for it (AVX2: Q4_0 and Q4_K, kernels_avx2_grouped.cc; AVX-512 VNNI: all three,
// kernels_avx512_grouped.cc), and read back row by row for GetRows.
//
// Why: a matmul kernel multiplies 16 rows at once, one row per 32-bit lane. In the file's
// layout each lane's bytes lie in another row, 16 row streams that the kernel must gather
// and reduce (a shuffle tree per block and token); grouped, the 16 rows' bytes for 4
// elements are one 64-byte load, a byte dot product (vpdpbusd) leaves each row's sum in its
// own lane, and the weights stream as one contiguous run.
//
// Layout (rows % 16 == 0; the same bytes as the file's, reordered):
// - group g (rows 16g .. 16g + 15) is the g-th run of 16 * row_bytes bytes;
// - in it, block b (elements 32b .. 32b + 31) is the b-th run of 16 * block_bytes bytes:
//   32 bytes of scales (row r's fp16 d at 2r), then kChunks chunks of 64 bytes (Q4_0: 4,
//   Q8_0: 8): chunk c holds row r's code bytes 4c .. 4c + 3 at 4r. Q4_0 bytes are the
//   file's (element j in the low nibble of byte j, j + 16 in the high one); Q8_0 codes are
//   stored plus 128, as unsigned bytes (what vpdpbusd multiplies).
// - Q4_K (cols % 256 == 0): super-block b (elements 256b ..) is the b-th run of 16 * 144
//   bytes: row r's fp16 d at 2r and dmin at 32 + 2r; the 12 bytes of packed 6-bit scales
//   and mins as three 32-bit words, word w of row r at 64 (w + 1) + 4r; then 32 chunks of
//   64 bytes, chunk c holding row r's code bytes 4c .. 4c + 3 at 256 + 64c + 4r (the file's
//   bytes: chunk c's low nibbles are elements 64 (c / 8) + 4 (c % 8) .., its high nibbles
//   the 32 after them).
//
// Contract: plain functions of their arguments, baseline ISA, thread-safe, no allocation.
#ifndef CASCADE_KERNELS_CPU_ROW_GROUPS_H_
#define CASCADE_KERNELS_CPU_ROW_GROUPS_H_

#include <cstdint>

#include "tensor/tensor_type.h"

namespace cascade::cpu {

inline constexpr int64_t kRowGroup = 16;

// Whether a (rows, cols) weight of `type` can be grouped: Q8_0 or Q4_0 (cols % 32 == 0) or
// Q4_K (cols % 256 == 0), rows a positive multiple of 16.
bool RowGroupable(TensorType type, int64_t rows, int64_t cols);

// Writes groups [g0, g1) of the row-major weight `src` (rows of cols elements of `type`;
// RowGroupable) to dst, which holds the whole grouped weight (the same size as src).
void GroupRows(TensorType type, const uint8_t* src, int64_t cols, int64_t g0, int64_t g1,
               uint8_t* dst);

// Writes row `row` of the grouped weight `grouped` to out in the file's layout (row_bytes
// bytes).
void UngroupRow(TensorType type, const uint8_t* grouped, int64_t cols, int64_t row,
                uint8_t* out);

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_ROW_GROUPS_H_
