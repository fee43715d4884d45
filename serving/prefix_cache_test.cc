#include "serving/prefix_cache.h"

#include <numeric>

#include "gtest/gtest.h"

namespace cascade {
namespace {

std::vector<int32_t> Range(int32_t from, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Caches the full blocks of `tokens` as a sequence would publish them, referenced.
std::vector<BlockName> Publish(PrefixCache& c, const std::vector<int32_t>& tokens) {
  std::vector<BlockName> names;
  BlockName parent;
  const int bs = c.block_size();
  for (size_t b = 0; (b + 1) * bs <= tokens.size(); ++b) {
    std::span<const int32_t> block(tokens.data() + b * bs, bs);
    const BlockName name = PrefixCache::NameOf(parent, block);
    EXPECT_TRUE(c.Insert(name, parent, block, /*referenced=*/true));
    names.push_back(name);
    parent = name;
  }
  return names;
}

TEST(PrefixCache, NamesChainThroughTheParent) {
  const std::vector<int32_t> a = Range(0, 4), b = Range(4, 4);
  const BlockName root;
  EXPECT_EQ(PrefixCache::NameOf(root, a), PrefixCache::NameOf(root, a));
  EXPECT_NE(PrefixCache::NameOf(root, a), PrefixCache::NameOf(root, b));
  // The same tokens after another prefix are another block.
  EXPECT_NE(PrefixCache::NameOf(PrefixCache::NameOf(root, a), b), PrefixCache::NameOf(root, b));
}

TEST(PrefixCache, MatchesTheLeadingCachedBlocksAndCountsTheirUsers) {
  PrefixCache c(4);
  const std::vector<int32_t> prompt = Range(100, 11);  // 2 full blocks and 3 tokens
  const std::vector<BlockName> names = Publish(c, prompt);
  ASSERT_EQ(names.size(), 2u);
  std::vector<int32_t> other = prompt;
  other[5] = 7;  // differs in the second block
  std::vector<BlockName> hits = c.Match(other, 10);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0], names[0]);
  EXPECT_EQ(c.RefCount(names[0]), 2);
  EXPECT_EQ(c.Match(prompt, 1).size(), 1u);  // at most max_blocks
  EXPECT_EQ(c.Match(prompt, 10).size(), 2u);
  EXPECT_EQ(c.RefCount(names[0]), 4);
  EXPECT_FALSE(c.Insert(names[1], names[0], std::span(prompt).subspan(4, 4), true));
}

TEST(PrefixCache, IdleBlocksGoLeastRecentlyUsedFirstAndLaterBlocksBeforeTheirPrefix) {
  PrefixCache c(2);
  const std::vector<BlockName> first = Publish(c, Range(0, 6));    // 3 blocks
  const std::vector<BlockName> second = Publish(c, Range(50, 4));  // 2 blocks
  EXPECT_EQ(c.idle_blocks(), 0);
  EXPECT_TRUE(c.EvictIdle(5).empty());  // all in use
  c.Release(first);
  c.Release(second);
  EXPECT_EQ(c.idle_blocks(), 5);
  EXPECT_EQ(c.referenced_blocks(), 0);
  const std::vector<BlockName> gone = c.EvictIdle(2);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0], first[2]);  // the oldest prefix, its last block first
  EXPECT_EQ(gone[1], first[1]);
  EXPECT_TRUE(c.Contains(first[0]));
  // A hit makes a block busy (not evictable) and recent.
  ASSERT_EQ(c.Match(Range(0, 6), 10).size(), 1u);
  const std::vector<BlockName> next = c.EvictIdle(10);
  EXPECT_EQ(next.size(), 2u);
  EXPECT_TRUE(c.Contains(first[0]));
  EXPECT_EQ(c.blocks(), 1);
}

TEST(PrefixCache, ACollidingNameIsNoHit) {
  PrefixCache c(2);
  const std::vector<int32_t> tokens = Range(0, 2);
  // Another prefix filed under the name these tokens hash to (as a collision would).
  const BlockName name = PrefixCache::NameOf({}, tokens);
  const std::vector<int32_t> other = {9, 9};
  ASSERT_TRUE(c.Insert(name, {}, other, false));
  EXPECT_TRUE(c.Match(tokens, 1).empty());
  c.Forget(name);
  EXPECT_EQ(c.blocks(), 0);
  EXPECT_EQ(c.idle_blocks(), 0);
}

}  // namespace
}  // namespace cascade
