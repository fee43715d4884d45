#include "engine/kv_cache.h"

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

}  // namespace
}  // namespace cascade
