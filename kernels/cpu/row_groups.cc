#include "kernels/cpu/row_groups.h"

#include <array>
#include <cstring>

#include "tensor/quant.h"

namespace cascade::cpu {
namespace {

// Per block of one row: its bytes in the file, and how many 4-byte code groups it has.
struct BlockShape {
  int64_t bytes;   // 18 (Q4_0) or 34 (Q8_0): the fp16 scale, then the codes
  int64_t chunks;  // 4-byte code groups: 4 or 8
  bool q8;
};

BlockShape ShapeOf(TensorType type) {
  return type == TensorType::kQ8_0 ? BlockShape{sizeof(BlockQ8_0), 8, true}
                                   : BlockShape{sizeof(BlockQ4_0), 4, false};
}

// Q4_K: row r's super-block in the file's layout (144 bytes: d, dmin, 12 scale bytes, 128
// code bytes) and its places in the group's run of 16 (row_groups.h): each (offset in the
// file's block, offset of row 0's bytes in the run, row step, bytes).
struct Piece {
  int file;
  int group;
  int step;
  int bytes;
};
constexpr int kQ4KPieces = 2 + 3 + 32;
constexpr std::array<Piece, kQ4KPieces> Q4KPieces() {
  std::array<Piece, kQ4KPieces> p{};
  p[0] = {0, 0, 2, 2};   // d
  p[1] = {2, 32, 2, 2};  // dmin
  for (int w = 0; w < 3; ++w) p[2 + w] = {4 + 4 * w, 64 * (w + 1), 4, 4};
  for (int c = 0; c < 32; ++c) p[5 + c] = {16 + 4 * c, 256 + 64 * c, 4, 4};
  return p;
}
constexpr std::array<Piece, kQ4KPieces> kQ4K = Q4KPieces();

void GroupQ4K(const uint8_t* src, int64_t cols, int64_t g0, int64_t g1, uint8_t* dst) {
  const int64_t nb = cols / kQKK;
  const int64_t row_bytes = nb * static_cast<int64_t>(sizeof(BlockQ4K));
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* rows = src + g * kRowGroup * row_bytes;
    uint8_t* out = dst + g * kRowGroup * row_bytes;
    for (int64_t b = 0; b < nb; ++b, out += kRowGroup * sizeof(BlockQ4K)) {
      for (int64_t r = 0; r < kRowGroup; ++r) {
        const uint8_t* blk = rows + r * row_bytes + b * static_cast<int64_t>(sizeof(BlockQ4K));
        for (const Piece& p : kQ4K) std::memcpy(out + p.group + p.step * r, blk + p.file, p.bytes);
      }
    }
  }
}

}  // namespace

bool RowGroupable(TensorType type, int64_t rows, int64_t cols) {
  if (rows <= 0 || rows % kRowGroup != 0 || cols <= 0) return false;
  switch (type) {
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
      return cols % kQK == 0;
    case TensorType::kQ4_K:
      return cols % kQKK == 0;
    default:
      return false;
  }
}

void GroupRows(TensorType type, const uint8_t* src, int64_t cols, int64_t g0, int64_t g1,
               uint8_t* dst) {
  if (type == TensorType::kQ4_K) {
    GroupQ4K(src, cols, g0, g1, dst);
    return;
  }
  const BlockShape s = ShapeOf(type);
  const int64_t nb = cols / kQK;
  const int64_t row_bytes = nb * s.bytes;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* rows = src + g * kRowGroup * row_bytes;
    uint8_t* out = dst + g * kRowGroup * row_bytes;
    for (int64_t b = 0; b < nb; ++b, out += kRowGroup * s.bytes) {
      for (int64_t r = 0; r < kRowGroup; ++r) {
        const uint8_t* blk = rows + r * row_bytes + b * s.bytes;
        std::memcpy(out + 2 * r, blk, 2);
        for (int64_t c = 0; c < s.chunks; ++c) {
          uint8_t* o = out + 2 * kRowGroup + 64 * c + 4 * r;
          std::memcpy(o, blk + 2 + 4 * c, 4);
          if (s.q8) {
            for (int i = 0; i < 4; ++i) o[i] ^= 0x80;  // int8 q -> q + 128
          }
        }
      }
    }
  }
}

void UngroupRow(TensorType type, const uint8_t* grouped, int64_t cols, int64_t row,
                uint8_t* out) {
  const int64_t r = row % kRowGroup;
  if (type == TensorType::kQ4_K) {
    const int64_t nb = cols / kQKK;
    constexpr int64_t kBlock = sizeof(BlockQ4K);
    const uint8_t* in = grouped + (row - r) * nb * kBlock;
    for (int64_t b = 0; b < nb; ++b, in += kRowGroup * kBlock, out += kBlock) {
      for (const Piece& p : kQ4K) std::memcpy(out + p.file, in + p.group + p.step * r, p.bytes);
    }
    return;
  }
  const BlockShape s = ShapeOf(type);
  const int64_t nb = cols / kQK;
  const int64_t row_bytes = nb * s.bytes;
  const uint8_t* in = grouped + (row - r) * row_bytes;
  for (int64_t b = 0; b < nb; ++b, in += kRowGroup * s.bytes, out += s.bytes) {
    std::memcpy(out, in + 2 * r, 2);
    for (int64_t c = 0; c < s.chunks; ++c) {
      uint8_t* o = out + 2 + 4 * c;
      std::memcpy(o, in + 2 * kRowGroup + 64 * c + 4 * r, 4);
      if (s.q8) {
        for (int i = 0; i < 4; ++i) o[i] ^= 0x80;
      }
    }
  }
}

}  // namespace cascade::cpu
