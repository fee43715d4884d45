#include "kernels/cpu/weight_arena.h"

#include <cstring>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace cascade::cpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

uintptr_t Addr(const uint8_t* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(WeightArena, PacksSmallWeightsBackToBackInHugePageAlignedChunks) {
  WeightArena arena(4 * kMiB);
  uint8_t* a = arena.Allocate(1000);  // rounded up to 1024
  uint8_t* b = arena.Allocate(64);
  uint8_t* c = arena.Allocate(1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(Addr(a) % kHugePageBytes, 0u);
  EXPECT_EQ(b, a + 1024);
  EXPECT_EQ(c, b + 64);
  EXPECT_EQ(arena.chunks(), 1u);
  EXPECT_EQ(arena.reserved_bytes(), 4 * kMiB);
}

TEST(WeightArena, StartsAChunkWhenAWeightDoesNotFitTheRest) {
  WeightArena arena(4 * kMiB);
  uint8_t* a = arena.Allocate(1536 * 1024);  // under half a chunk: shared
  uint8_t* b = arena.Allocate(1536 * 1024);
  uint8_t* c = arena.Allocate(1536 * 1024);  // 3 x 1.5 MiB > 4 MiB: a second chunk
  EXPECT_EQ(b, a + 1536 * 1024);
  EXPECT_EQ(Addr(c) % kHugePageBytes, 0u);
  EXPECT_TRUE(c < a || c >= a + 4 * kMiB);
  EXPECT_EQ(arena.chunks(), 2u);
}

TEST(WeightArena, GivesALargeWeightItsOwnChunkAndKeepsFillingTheShared) {
  WeightArena arena(4 * kMiB);
  uint8_t* small = arena.Allocate(100);
  uint8_t* large = arena.Allocate(5 * kMiB + 3);  // own chunk, rounded to 6 MiB
  uint8_t* next = arena.Allocate(100);
  EXPECT_EQ(Addr(large) % kHugePageBytes, 0u);
  EXPECT_EQ(next, small + 128);  // the shared chunk's tail is not abandoned
  EXPECT_EQ(arena.chunks(), 2u);
  EXPECT_EQ(arena.reserved_bytes(), 4 * kMiB + 6 * kMiB);
}

TEST(WeightArena, BoundariesOfTheSharedChunk) {
  WeightArena arena(4 * kMiB);
  uint8_t* half = arena.Allocate(2 * kMiB);  // exactly half a chunk: its own, not rounded up
  EXPECT_EQ(arena.reserved_bytes(), 2 * kMiB);
  uint8_t* a = arena.Allocate(1536 * 1024);  // under half: the shared chunk
  arena.Allocate(1536 * 1024);
  uint8_t* rest = arena.Allocate(kMiB - 63);  // rounds up to exactly the 1 MiB left
  uint8_t* next = arena.Allocate(1);          // nothing left: a new shared chunk
  EXPECT_NE(half, nullptr);
  EXPECT_EQ(rest, a + 3 * kMiB);
  EXPECT_EQ(Addr(next) % kHugePageBytes, 0u);
  EXPECT_EQ(arena.chunks(), 3u);
  uint8_t* z0 = arena.Allocate(0);
  uint8_t* z1 = arena.Allocate(0);
  EXPECT_NE(z0, nullptr);
  EXPECT_NE(z0, z1);  // distinct even when empty
  EXPECT_EQ(arena.Allocate(~size_t{0}), nullptr);  // no size wraps around when rounded
}

TEST(WeightArena, AllocationsDoNotOverlap) {
  WeightArena arena(2 * kMiB);
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  size_t size = 1;
  for (int i = 0; i < 200; ++i) {
    size = size * 7 % 1300017 + 1;  // 1 B to ~1.2 MiB: shared and own chunks, unaligned sizes
    uint8_t* p = arena.Allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(Addr(p) % WeightArena::kAlign, 0u);
    std::memset(p, i & 0xff, size);
    blocks.emplace_back(p, size);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto [p, n] = blocks[i];
    for (size_t j = 0; j < n; j += 997) ASSERT_EQ(p[j], static_cast<uint8_t>(i & 0xff)) << i;
    ASSERT_EQ(p[n - 1], static_cast<uint8_t>(i & 0xff)) << i;
  }
}

TEST(WeightArena, ChunkSizeIsWholeHugePages) {
  WeightArena arena(3 * kMiB + 5);  // rounded up to 4 MiB
  arena.Allocate(1);
  EXPECT_EQ(arena.reserved_bytes(), 4 * kMiB);
}

}  // namespace
}  // namespace cascade::cpu
