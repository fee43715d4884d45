#include "kernels/cpu/row_groups.h"

#include <array>
#include <cstring>

#include "tensor/quant.h"

namespace cascade::cpu {
namespace {

// Where a row's block in the file's layout goes in its group's run of 16 blocks
// (row_groups.h), as pieces of 2 or 4 bytes: (offset in the file's block, offset of row
// 0's bytes in the run, row step, bytes, whether the bytes are stored + 128).
struct Piece {
  int file;
  int group;
  int step;
  int bytes;
  bool flip = false;
};
struct Layout {
  int64_t elems;        // elements per block
  int64_t block_bytes;  // one row's block (the run is 16 of them)
  int count;
  std::array<Piece, 37> pieces;
};

// Q8_0 / Q4_0 (34 / 18 bytes: the fp16 d, then the codes).
constexpr Layout Q40Layout(bool q8) {
  const int chunks = q8 ? 8 : 4;
  Layout l{kQK, q8 ? 34 : 18, 1 + chunks, {}};
  l.pieces[0] = {0, 0, 2, 2};  // d
  for (int c = 0; c < chunks; ++c) l.pieces[1 + c] = {2 + 4 * c, 32 + 64 * c, 4, 4, q8};
  return l;
}
// Q4_K (144 bytes: d, dmin, 12 scale bytes, 128 code bytes).
constexpr Layout Q4KLayout() {
  Layout l{kQKK, 144, 2 + 3 + 32, {}};
  l.pieces[0] = {0, 0, 2, 2};   // d
  l.pieces[1] = {2, 32, 2, 2};  // dmin
  for (int w = 0; w < 3; ++w) l.pieces[2 + w] = {4 + 4 * w, 64 * (w + 1), 4, 4};
  for (int c = 0; c < 32; ++c) l.pieces[5 + c] = {16 + 4 * c, 256 + 64 * c, 4, 4};
  return l;
}
constexpr Layout kQ8_0 = Q40Layout(true);
constexpr Layout kQ4_0 = Q40Layout(false);
constexpr Layout kQ4_K = Q4KLayout();
static_assert(kQ8_0.block_bytes == sizeof(BlockQ8_0) && kQ4_0.block_bytes == sizeof(BlockQ4_0) &&
              kQ4_K.block_bytes == sizeof(BlockQ4K));

const Layout* LayoutOf(TensorType type) {
  switch (type) {
    case TensorType::kQ8_0:
      return &kQ8_0;
    case TensorType::kQ4_0:
      return &kQ4_0;
    case TensorType::kQ4_K:
      return &kQ4_K;
    default:
      return nullptr;
  }
}

// Copies piece p from src to dst (either direction: + 128 and - 128 are the same flip).
// Fixed sizes, so the copies compile to moves (a load-time loop over every weight byte).
inline void Move(const Piece& p, const uint8_t* src, uint8_t* dst) {
  if (p.bytes == 4) {
    uint32_t v;
    std::memcpy(&v, src, 4);
    if (p.flip) v ^= 0x80808080u;
    std::memcpy(dst, &v, 4);
  } else {
    std::memcpy(dst, src, 2);
  }
}

}  // namespace

bool RowGroupable(TensorType type, int64_t rows, int64_t cols) {
  const Layout* l = LayoutOf(type);
  return l != nullptr && rows > 0 && rows % kRowGroup == 0 && cols > 0 && cols % l->elems == 0;
}

void GroupRows(TensorType type, const uint8_t* src, int64_t cols, int64_t g0, int64_t g1,
               uint8_t* dst) {
  const Layout& l = *LayoutOf(type);
  const int64_t nb = cols / l.elems;
  const int64_t row_bytes = nb * l.block_bytes;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* rows = src + g * kRowGroup * row_bytes;
    uint8_t* out = dst + g * kRowGroup * row_bytes;
    for (int64_t b = 0; b < nb; ++b, out += kRowGroup * l.block_bytes) {
      for (int64_t r = 0; r < kRowGroup; ++r) {
        const uint8_t* blk = rows + r * row_bytes + b * l.block_bytes;
        for (int i = 0; i < l.count; ++i) {
          const Piece& p = l.pieces[i];
          Move(p, blk + p.file, out + p.group + p.step * r);
        }
      }
    }
  }
}

void UngroupRow(TensorType type, const uint8_t* grouped, int64_t cols, int64_t row,
                uint8_t* out) {
  const Layout& l = *LayoutOf(type);
  const int64_t nb = cols / l.elems;
  const int64_t r = row % kRowGroup;
  const uint8_t* in = grouped + (row - r) * nb * l.block_bytes;
  for (int64_t b = 0; b < nb; ++b, in += kRowGroup * l.block_bytes, out += l.block_bytes) {
    for (int i = 0; i < l.count; ++i) {
      const Piece& p = l.pieces[i];
      Move(p, in + p.group + p.step * r, out + p.file);
    }
  }
}

}  // namespace cascade::cpu
