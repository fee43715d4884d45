#include "kernels/cpu/gemm_layout.h"

#include <algorithm>

namespace cascade::cpu {

GemmBlocks::GemmBlocks(int64_t n_, int64_t k_) : n(n_), k(k_) {
  kp = (k + 7) / 8 * 8;
  steps = kp / 8;
  chunks = (steps + kGemmChunkSteps - 1) / kGemmChunkSteps;
  const int64_t even = (n + kGemmBlockTokens - 1) / kGemmBlockTokens;
  nb = std::min(kGemmBlockTokens,
                ((n + even - 1) / even + kGemmTokens - 1) / kGemmTokens * kGemmTokens);
  blocks = (n + nb - 1) / nb;
}

int64_t GemmBlocks::Count(int64_t b) const { return std::min(nb, n - b * nb); }

int64_t GemmBlocks::Tiles(int64_t b) const { return (Count(b) + kGemmTokens - 1) / kGemmTokens; }

// Each lane's chunk holds every tile's activations back to back: one stream per sweep.
int64_t GemmBlocks::BlockFloats() const { return 8 * chunks * nb * kGemmChunkSteps; }

LaneLayout GemmBlocks::XLayout(int64_t b) const {
  return {chunks * Tiles(b) * kTileChunk, Tiles(b) * kTileChunk, kGemmTokens};
}

int64_t EqualTokenBlock(int64_t n, size_t row_bytes, int tile) {
  const int64_t fit =
      std::min<int64_t>(static_cast<int64_t>((256u << 10) / std::max<size_t>(row_bytes, 1)), 255);
  const int64_t most = std::max<int64_t>(tile, fit / tile * tile);
  const int64_t blocks = (n + most - 1) / most;
  return std::min(most, ((n + blocks - 1) / blocks + tile - 1) / tile * tile);
}

}  // namespace cascade::cpu
