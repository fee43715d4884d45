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
  const int bs = c.block_size();
  const std::vector<BlockName> names = PrefixCache::ChainNames(tokens, bs, 1000);
  for (size_t b = 0; b < names.size(); ++b) {
    std::span<const int32_t> block(tokens.data() + b * bs, bs);
    EXPECT_TRUE(c.Insert(names[b], b == 0 ? BlockName{} : names[b - 1], block,
                         /*referenced=*/true));
  }
  return names;
}

// Match as admission calls it: the names of `tokens`' first max_blocks full blocks.
int64_t MatchTokens(PrefixCache& c, const std::vector<int32_t>& tokens, int64_t max_blocks) {
  return c.Match(tokens, PrefixCache::ChainNames(tokens, c.block_size(), max_blocks));
}

TEST(PrefixCache, NamesChainThroughTheParent) {
  const std::vector<int32_t> a = Range(0, 4), b = Range(4, 4);
  const BlockName root;
  EXPECT_EQ(PrefixCache::NameOf(root, a), PrefixCache::NameOf(root, a));
  EXPECT_NE(PrefixCache::NameOf(root, a), PrefixCache::NameOf(root, b));
  // The same tokens after another prefix are another block.
  EXPECT_NE(PrefixCache::NameOf(PrefixCache::NameOf(root, a), b), PrefixCache::NameOf(root, b));
  // ChainNames: full blocks only, at most max_blocks, each the NameOf its parent.
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  ab.push_back(9);
  const std::vector<BlockName> names = PrefixCache::ChainNames(ab, 4, 10);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], PrefixCache::NameOf(PrefixCache::NameOf(root, a), b));
  EXPECT_EQ(PrefixCache::ChainNames(ab, 4, 1).size(), 1u);
  EXPECT_EQ(PrefixCache::ChainNames(b, 4, 1, names[0]), std::vector<BlockName>{names[1]});
}

TEST(PrefixCache, MatchesTheLeadingCachedBlocksAndCountsTheirUsers) {
  PrefixCache c(4, nullptr);
  const std::vector<int32_t> prompt = Range(100, 11);  // 2 full blocks and 3 tokens
  const std::vector<BlockName> names = Publish(c, prompt);
  ASSERT_EQ(names.size(), 2u);
  std::vector<int32_t> other = prompt;
  other[5] = 7;  // differs in the second block
  EXPECT_EQ(MatchTokens(c, other, 10), 1);
  EXPECT_EQ(c.RefCount(names[0]), 2);
  EXPECT_EQ(MatchTokens(c, prompt, 1), 1);  // at most max_blocks
  EXPECT_EQ(MatchTokens(c, prompt, 10), 2);
  EXPECT_EQ(c.RefCount(names[0]), 4);
  EXPECT_FALSE(c.Insert(names[1], names[0], std::span(prompt).subspan(4, 4), true));
}

// Where a prompt parts from the cached ones inside a block: the sibling block whose tokens
// begin with the longest run of the prompt's next tokens, capped, referenced when found.
TEST(PrefixCache, APromptPartingInsideABlockFindsTheLongestSharedRun) {
  PrefixCache c(4, nullptr);
  const std::vector<int32_t> a = {1, 2, 3, 4, 10, 11, 12, 13};
  const std::vector<int32_t> b = {1, 2, 3, 4, 10, 11, 20, 21};
  const std::vector<BlockName> na = Publish(c, a);
  const std::vector<BlockName> nb = PrefixCache::ChainNames(b, 4, 10);
  ASSERT_EQ(na[0], nb[0]);  // one first block, two children
  ASSERT_TRUE(c.Insert(nb[1], nb[0], std::span(b).subspan(4), /*referenced=*/false));
  c.Release({&na[1], 1});
  ASSERT_EQ(c.RefCount(na[0]), 1);
  const std::vector<int32_t> next = {10, 11, 12, 99};  // after the first block
  PrefixCache::PartialHit hit = c.MatchPartial(na[0], next, 3);
  EXPECT_EQ(hit.name, na[1]);
  EXPECT_EQ(hit.rows, 3);
  EXPECT_EQ(c.RefCount(na[1]), 1);  // idle before: in use now
  EXPECT_EQ(c.RefCount(nb[1]), 0);
  // Capped by max_rows (the prompt's last token is computed); none where no block begins
  // with the next token, or after a block with no cached children.
  EXPECT_EQ(c.MatchPartial(na[0], next, 1).rows, 1);
  EXPECT_EQ(c.MatchPartial(na[0], std::vector<int32_t>{7, 10, 11}, 3).rows, 0);
  EXPECT_EQ(c.MatchPartial(na[1], next, 3).rows, 0);
  // The first blocks of all prompts are the children of the zero name.
  EXPECT_EQ(c.MatchPartial(BlockName{}, std::vector<int32_t>{1, 2, 5}, 3).rows, 2);
  // An evicted or forgotten block is no longer offered.
  c.Release(std::vector<BlockName>{na[0], na[1], na[1]});
  EXPECT_EQ(c.RefCount(na[1]), 0);
  c.Forget(na[1]);
  hit = c.MatchPartial(na[0], next, 3);
  EXPECT_EQ(hit.name, nb[1]);
  EXPECT_EQ(hit.rows, 2);
  c.Release({&hit.name, 1});
  c.Release({&na[0], 1});
  EXPECT_EQ(c.EvictIdle(10), (std::vector<BlockName>{nb[1], na[0]}));
  EXPECT_EQ(c.MatchPartial(BlockName{}, a, 3).rows, 0);
}

TEST(PrefixCache, IdleBlocksGoLeastRecentlyUsedFirstAndLaterBlocksBeforeTheirPrefix) {
  PrefixCache c(2, nullptr);
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
  ASSERT_EQ(MatchTokens(c, Range(0, 6), 10), 1);
  const std::vector<BlockName> next = c.EvictIdle(10);
  EXPECT_EQ(next.size(), 2u);
  EXPECT_TRUE(c.Contains(first[0]));
  EXPECT_EQ(c.blocks(), 1);
}

TEST(PrefixCache, ACollidingNameIsNoHit) {
  PrefixCache c(2, nullptr);
  const std::vector<int32_t> tokens = Range(0, 2);
  // Another prefix filed under the name these tokens hash to (as a collision would).
  const BlockName name = PrefixCache::NameOf({}, tokens);
  const std::vector<int32_t> other = {9, 9};
  ASSERT_TRUE(c.Insert(name, {}, other, false));
  EXPECT_EQ(MatchTokens(c, tokens, 1), 0);
  c.Forget(name);
  EXPECT_EQ(c.blocks(), 0);
  EXPECT_EQ(c.idle_blocks(), 0);
}

TEST(PrefixCache, ItsViewHoldsWhatItHoldsForOtherThreads) {
  PrefixView view;
  PrefixCache c(2, &view);
  const std::vector<int32_t> tokens = Range(0, 7);
  EXPECT_EQ(view.CachedTokens(tokens), 0);
  const std::vector<BlockName> names = Publish(c, tokens);  // 3 blocks
  EXPECT_EQ(view.CachedTokens(tokens), 6);
  c.Release(names);
  ASSERT_EQ(c.EvictIdle(1).size(), 1u);  // the last block
  EXPECT_EQ(view.CachedTokens(tokens), 4);
  c.Forget(names[0]);
  EXPECT_EQ(view.CachedTokens(tokens), 0);
  PrefixCache next(4, &view);  // a new pipeline's cache: the view starts again
  Publish(next, tokens);
  EXPECT_EQ(view.CachedTokens(tokens), 4);
}

}  // namespace
}  // namespace cascade
