#include "kernels/cpu/row_groups.h"

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

}  // namespace

bool RowGroupable(TensorType type, int64_t rows, int64_t cols) {
  return (type == TensorType::kQ8_0 || type == TensorType::kQ4_0) && rows > 0 &&
         rows % kRowGroup == 0 && cols > 0 && cols % kQK == 0;
}

void GroupRows(TensorType type, const uint8_t* src, int64_t cols, int64_t g0, int64_t g1,
               uint8_t* dst) {
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
  const BlockShape s = ShapeOf(type);
  const int64_t nb = cols / kQK;
  const int64_t row_bytes = nb * s.bytes;
  const int64_t r = row % kRowGroup;
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
