#include "engine/kv_cache.h"

#include <unistd.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

KvCacheOptions Small(int64_t blocks) {
  KvCacheOptions o;
  o.n_layers = 1;
  o.n_kv_heads = 1;
  o.head_dim = 2;
  o.block_size = 4;
  o.num_blocks = blocks;
  o.max_positions = 64;
  return o;
}

std::unique_ptr<KvCache> Make(int64_t blocks) {
  static CpuBackend backend({});
  auto kv = KvCache::Create(Small(blocks), backend);
  EXPECT_TRUE(kv.ok()) << kv.status();
  return std::move(*kv);
}

Batch Tokens(SeqId seq, int32_t from, int32_t count) {
  Batch b;
  for (int32_t i = 0; i < count; ++i) b.push_back({0, seq, from + i, false});
  return b;
}

TEST(KvCache, HoldsF32OrF16Only) {
  static CpuBackend backend({});
  KvCacheOptions o = Small(4);
  o.type = TensorType::kF16;
  auto f16 = KvCache::Create(o, backend);
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(KvCache::BytesFor(o) * 2, KvCache::BytesFor(Small(4)));
  // Layer 1 starts half as far in as with F32.
  o.n_layers = 2;
  auto two = KvCache::Create(o, backend);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(static_cast<char*>((*two)->keys(1)) - static_cast<char*>((*two)->keys(0)),
            4 * 4 * 2 * 2);
  o.type = TensorType::kQ4_0;
  auto bad = KvCache::Create(o, backend);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("Q4_0"));
}

TEST(KvCache, PlansThenApplies) {
  auto kv_ptr = Make(4);
  KvCache& kv = *kv_ptr;
  auto plan = kv.PlanBatch(Tokens(7, 0, 6));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(kv.free_blocks(), 4);  // planning changes nothing
  kv.Apply(*plan);
  EXPECT_EQ(kv.Length(7), 6);
  EXPECT_EQ(kv.BlockTable(7).size(), 2u);
  EXPECT_EQ(kv.free_blocks(), 2);
  // slot rows follow the block table
  const auto& t = kv.BlockTable(7);
  EXPECT_EQ(plan->slot_rows[0], t[0] * 4);
  EXPECT_EQ(plan->slot_rows[5], t[1] * 4 + 1);
  kv.Free(7);
  EXPECT_EQ(kv.free_blocks(), 4);
  EXPECT_FALSE(kv.Has(7));
}

TEST(KvCache, RefusesWholeBatchWhenFull) {
  auto kv_ptr = Make(3);
  KvCache& kv = *kv_ptr;
  kv.Apply(*kv.PlanBatch(Tokens(1, 0, 8)));  // 2 blocks
  Batch b = Tokens(2, 0, 4);                 // 1 block: fits
  Batch more = Tokens(3, 0, 4);              // another block: does not
  b.insert(b.end(), more.begin(), more.end());
  auto plan = kv.PlanBatch(b);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(kv.Has(2));
  EXPECT_EQ(kv.free_blocks(), 1);
}

TEST(KvCache, RejectsGapsAndOutOfContextPositions) {
  auto kv_ptr = Make(8);
  KvCache& kv = *kv_ptr;
  kv.Apply(*kv.PlanBatch(Tokens(1, 0, 3)));
  auto gap = kv.PlanBatch(Tokens(1, 5, 1));
  ASSERT_FALSE(gap.ok());
  EXPECT_THAT(gap.status().message(), HasSubstr("holds only 3"));
  Batch skip = {{0, 1, 3, false}, {0, 1, 5, false}};
  EXPECT_THAT(kv.PlanBatch(skip).status().message(), HasSubstr("consecutive"));
  EXPECT_THAT(kv.PlanBatch(Tokens(2, 63, 2)).status().message(), HasSubstr("outside the context"));
}

TEST(KvCache, RewindReleasesBlocks) {
  auto kv_ptr = Make(4);
  KvCache& kv = *kv_ptr;
  kv.Apply(*kv.PlanBatch(Tokens(1, 0, 12)));  // 3 blocks
  EXPECT_EQ(kv.free_blocks(), 1);
  kv.Apply(*kv.PlanBatch(Tokens(1, 2, 1)));  // rewind to length 3: 1 block
  EXPECT_EQ(kv.Length(1), 3);
  EXPECT_EQ(kv.BlockTable(1).size(), 1u);
  EXPECT_EQ(kv.free_blocks(), 3);
  // a rewind plus growth of another sequence can use the released blocks at once
  kv.Apply(*kv.PlanBatch(Tokens(1, 0, 12)));
  Batch b = Tokens(1, 1, 1);
  Batch other = Tokens(2, 0, 8);
  b.insert(b.end(), other.begin(), other.end());
  auto plan = kv.PlanBatch(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  kv.Apply(*plan);
  EXPECT_EQ(kv.BlockTable(2).size(), 2u);
  EXPECT_EQ(kv.free_blocks(), 1);
}

constexpr BlockName kA{1, 1}, kB{2, 2}, kC{3, 3};

TEST(KvCache, SequencesShareCachedBlocks) {
  auto kv_ptr = Make(6);
  KvCache& kv = *kv_ptr;
  kv.Apply(*kv.PlanBatch(Tokens(1, 0, 9)));  // blocks 0, 1 full; 2 holds one token
  ASSERT_TRUE(kv.Publish({1, 0, kA}).ok());
  ASSERT_TRUE(kv.Publish({1, 1, kB}).ok());
  EXPECT_EQ(kv.Publish({1, 2, kC}).code(), absl::StatusCode::kInvalidArgument);  // not full
  EXPECT_TRUE(kv.Publish({1, 1, kA}).ok());  // a name cached already: nothing changes
  EXPECT_EQ(kv.cached_blocks(), 2);

  ASSERT_TRUE(kv.AttachPrefix({2, {kA, kB}, {}, 0}).ok());
  EXPECT_EQ(kv.Length(2), 8);
  EXPECT_EQ(kv.BlockTable(2)[0], kv.BlockTable(1)[0]);
  EXPECT_EQ(kv.BlockTable(2)[1], kv.BlockTable(1)[1]);
  EXPECT_EQ(kv.RefCount(kv.BlockTable(1)[0]), 2);
  EXPECT_TRUE(kv.AttachPrefix({2, {kA, kB}, {}, 0}).ok());  // sent again: the same
  EXPECT_EQ(kv.RefCount(kv.BlockTable(1)[0]), 2);
  EXPECT_EQ(kv.free_blocks(), 3);

  // The attached sequence goes on in a block of its own; a write into a shared block is
  // refused whole.
  auto next = kv.PlanBatch(Tokens(2, 8, 2));
  ASSERT_TRUE(next.ok()) << next.status();
  kv.Apply(*next);
  EXPECT_EQ(kv.BlockTable(2).size(), 3u);
  EXPECT_NE(kv.BlockTable(2)[2], kv.BlockTable(1)[2]);
  auto overwrite = kv.PlanBatch(Tokens(2, 6, 1));
  EXPECT_EQ(overwrite.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(overwrite.status().message(), HasSubstr("share"));

  // Freed by both, the named blocks stay cached (idle); the rest is free.
  kv.Free(1);
  EXPECT_EQ(kv.RefCount(kv.BlockTable(2)[0]), 1);
  kv.Free(2);
  EXPECT_EQ(kv.cached_blocks(), 2);
  EXPECT_EQ(kv.idle_cached_blocks(), 2);
  EXPECT_EQ(kv.free_blocks(), 4);
  ASSERT_TRUE(kv.AttachPrefix({3, {kA}, {}, 0}).ok());
  EXPECT_EQ(kv.idle_cached_blocks(), 1);
  kv.Free(3);
  kv.Evict(kA);
  kv.Evict(kC);  // unknown: nothing
  EXPECT_FALSE(kv.IsCached(kA));
  EXPECT_EQ(kv.free_blocks(), 5);
}

TEST(KvCache, AMissAttachesNothing) {
  auto kv_ptr = Make(4);
  KvCache& kv = *kv_ptr;
  kv.Apply(*kv.PlanBatch(Tokens(1, 0, 4)));
  ASSERT_TRUE(kv.Publish({1, 0, kA}).ok());
  absl::Status miss = kv.AttachPrefix({2, {kA, kB}, {}, 0});
  EXPECT_EQ(miss.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(miss.message(), HasSubstr("block 1 of 2"));
  EXPECT_FALSE(kv.Has(2));
  EXPECT_EQ(kv.RefCount(kv.BlockTable(1)[0]), 1);
  // A sequence that exists without the prefix is not given it.
  kv.Apply(*kv.PlanBatch(Tokens(3, 0, 2)));
  EXPECT_EQ(kv.AttachPrefix({3, {kA}, {}, 0}).code(), absl::StatusCode::kFailedPrecondition);
}

// A sequence whose prompt parts from a cached block inside it: its own block starts as a
// copy of the rows they share, every layer, K and V; the cached block stays as it was.
TEST(KvCache, APartialPrefixCopiesTheSharedRowsIntoABlockOfItsOwn) {
  static CpuBackend backend({});
  KvCacheOptions o = Small(6);
  o.n_layers = 2;
  o.n_kv_heads = 2;
  auto made = KvCache::Create(o, backend);
  ASSERT_TRUE(made.ok()) << made.status();
  KvCache& kv = **made;
  kv.Apply(*kv.PlanBatch(Tokens(1, 0, 8)));  // two full blocks of 4
  ASSERT_TRUE(kv.Publish({1, 0, kA}).ok());
  ASSERT_TRUE(kv.Publish({1, 1, kB}).ok());
  // Every element of every pool a distinct value.
  const int64_t per_layer = o.num_blocks * o.block_size * o.n_kv_heads * o.head_dim;
  for (int l = 0; l < o.n_layers; ++l) {
    for (int64_t e = 0; e < per_layer; ++e) {
      static_cast<float*>(kv.keys(l))[e] = static_cast<float>(1000 * l + e);
      static_cast<float*>(kv.values(l))[e] = -static_cast<float>(1000 * l + e);
    }
  }
  const int32_t source = kv.BlockTable(1)[1];
  ASSERT_TRUE(kv.AttachPrefix({2, {kA}, kB, 3}).ok());
  EXPECT_EQ(kv.Length(2), 7);
  ASSERT_EQ(kv.BlockTable(2).size(), 2u);
  EXPECT_EQ(kv.BlockTable(2)[0], kv.BlockTable(1)[0]);
  const int32_t own = kv.BlockTable(2)[1];
  EXPECT_NE(own, source);
  EXPECT_EQ(kv.RefCount(own), 1);
  EXPECT_EQ(kv.RefCount(source), 1);  // sequence 1's only
  const KvLayout l = kv.layout();
  for (int layer = 0; layer < o.n_layers; ++layer) {
    for (int h = 0; h < o.n_kv_heads; ++h) {
      for (int row = 0; row < o.block_size; ++row) {
        for (int d = 0; d < o.head_dim; ++d) {
          const int64_t from = l.Offset(int64_t{source} * o.block_size + row, h) + d;
          const int64_t to = l.Offset(int64_t{own} * o.block_size + row, h) + d;
          const float* k = static_cast<const float*>(kv.keys(layer));
          const float* v = static_cast<const float*>(kv.values(layer));
          if (row < 3) {
            EXPECT_EQ(k[to], k[from]) << "layer " << layer << " head " << h << " row " << row;
            EXPECT_EQ(v[to], v[from]);
          } else {
            EXPECT_NE(k[to], k[from]) << "row " << row << " is the sequence's to compute";
          }
        }
      }
    }
  }
  // The sequence goes on from position 7 in its own block.
  auto next = kv.PlanBatch(Tokens(2, 7, 2));
  ASSERT_TRUE(next.ok()) << next.status();
  // Sent again: the same; a partial block not cached, or rows beyond a block, refused.
  EXPECT_TRUE(kv.AttachPrefix({2, {kA}, kB, 3}).ok());
  EXPECT_EQ(kv.RefCount(own), 1);
  const absl::Status miss = kv.AttachPrefix({3, {kA}, kC, 2});
  EXPECT_EQ(miss.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(miss.message(), HasSubstr("the partial block"));
  EXPECT_FALSE(kv.Has(3));
  EXPECT_EQ(kv.AttachPrefix({3, {kA}, kB, 4}).code(), absl::StatusCode::kInvalidArgument);
  // A partial block alone (the prompts part in their first block).
  ASSERT_TRUE(kv.AttachPrefix({4, {}, kA, 2}).ok());
  EXPECT_EQ(kv.Length(4), 2);
  EXPECT_NE(kv.BlockTable(4)[0], kv.BlockTable(1)[0]);
}

TEST(KvCache, ABatchTakesIdleCachedBlocksLeastRecentlyUsedFirst) {
  auto kv_ptr = Make(3);
  KvCache& kv = *kv_ptr;
  for (auto [seq, name] : {std::pair{SeqId{1}, kA}, std::pair{SeqId{2}, kB}}) {
    kv.Apply(*kv.PlanBatch(Tokens(seq, 0, 4)));
    ASSERT_TRUE(kv.Publish({seq, 0, name}).ok());
  }
  kv.Free(2);  // B idle first, then A
  kv.Free(1);
  auto plan = kv.PlanBatch(Tokens(3, 0, 8));  // 2 blocks: the free one, then B's
  ASSERT_TRUE(plan.ok()) << plan.status();
  kv.Apply(*plan);
  EXPECT_FALSE(kv.IsCached(kB));
  EXPECT_TRUE(kv.IsCached(kA));
  EXPECT_EQ(kv.idle_cached_blocks(), 1);
  EXPECT_EQ(kv.PlanBatch(Tokens(4, 0, 8)).status().code(), absl::StatusCode::kResourceExhausted);
  kv.Free(3);
  EXPECT_EQ(kv.free_blocks(), 2);
}

}  // namespace
}  // namespace cascade

namespace cascade {
namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// A cache for 8 MiB of keys and 8 of values: resident at Create when asked (a planned
// cache takes its memory at load), and only as blocks are written otherwise.
TEST(KvCache, AResidentPoolTakesItsMemoryAtCreate) {
  KvCacheOptions o = Small(0);
  o.n_kv_heads = 8;
  o.head_dim = 64;
  o.block_size = 32;
  o.num_blocks = 128;  // 128 x 32 x 8 x 64 floats = 8 MiB per pool
  o.max_positions = 4096;
  const int64_t pools = static_cast<int64_t>(KvCache::BytesFor(o));
  ASSERT_EQ(pools, int64_t{16} << 20);
  CpuBackend backend({});

  const int64_t before_lazy = ResidentBytes();
  auto lazy = KvCache::Create(o, backend);
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  EXPECT_LT(ResidentBytes() - before_lazy, pools / 4);

  o.resident = true;
  const int64_t before = ResidentBytes();
  auto resident = KvCache::Create(o, backend);
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_GE(ResidentBytes() - before, pools);
}

}  // namespace
}  // namespace cascade
