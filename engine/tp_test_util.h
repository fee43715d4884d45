// Checks of a tensor-parallel stage against the unsplit one, written once for every kind
// of group: each rank of the group runs the same check with its own Collective (a thread
// of an InProcessGroup, or an MPI process) and compares its own output, which is the whole
// result on every rank, with an unsplit Stage it computes itself.
//
// Contract: test-only (GoogleTest assertions; thread-safe as they are). Every rank must
// call the same check with the same arguments, in the same order.
#ifndef CASCADE_ENGINE_TP_TEST_UTIL_H_
#define CASCADE_ENGINE_TP_TEST_UTIL_H_

#include <cstring>
#include <string>
#include <vector>

#include "engine/stage.h"
#include "engine/stage_test_util.h"
#include "gtest/gtest.h"
#include "model/model_source.h"
#include "model/synthetic.h"
#include "parallel/collective.h"

namespace cascade::testing {

// A shape whose GQA groups a split of 2 cuts (6 heads, 3 KV heads), whose FFN (160) and
// vocabulary (500) do not divide by 3, at F32.
inline ModelShape OddShape() {
  ModelShape s;
  s.name = "odd";
  s.vocab = 500;
  s.dim = 96;
  s.layers = 2;
  s.heads = 6;
  s.kv_heads = 3;
  s.ffn = 160;
  s.context = 128;
  return s;
}

inline StageOptions TpOptions(Collective* tp, LayerRange layers = {}) {
  StageOptions o;
  o.layers = layers;
  o.threads = 1;
  o.quantized_activations = false;  // F32 activations: the bound is about summation order
  o.kv_sequences = 2;
  o.max_batch_tokens = 64;
  o.tp = tp;
  return o;
}

// Teacher-forced logits of `ids`, greedy ids from a prompt, and a two-stage pipeline of
// split stages [0, k) + [k, L): each within `bound` of the unsplit stage (greedy ids
// equal). Returns the largest difference seen.
inline double CheckTpMatchesUnsplit(Collective& c, const ModelSource& src,
                                    const std::vector<int32_t>& ids, size_t greedy_total,
                                    double bound) {
  auto whole = Stage::Create(src, TpOptions(nullptr));
  auto split = Stage::Create(src, TpOptions(&c));
  EXPECT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(split.ok()) << split.status();
  if (!whole.ok() || !split.ok()) return 1e9;
  const std::vector<float> want = AllLogits(**whole, ids);
  const std::vector<float> got = AllLogits(**split, ids);
  double worst = MaxAbsDiff(got, want);
  EXPECT_LT(worst, bound) << "rank " << c.rank() << " of " << c.size() << ": whole model";
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 5));
  EXPECT_EQ(GreedyDecode(**split, prompt, greedy_total),
            GreedyDecode(**whole, prompt, greedy_total))
      << "rank " << c.rank() << " of " << c.size();

  const int L = static_cast<int>(src.config().n_layers);
  const int k = L / 2;
  if (k > 0) {
    auto a = Stage::Create(src, TpOptions(&c, {0, k}));
    auto b = Stage::Create(src, TpOptions(&c, {k, L}));
    EXPECT_TRUE(a.ok() && b.ok());
    if (!a.ok() || !b.ok()) return 1e9;
    Batch batch;
    for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], 7, static_cast<int32_t>(i), true});
    std::vector<float> hidden, logits;
    EXPECT_TRUE((*a)->Forward(batch, {}, &hidden).ok());
    EXPECT_TRUE((*b)->Forward(batch, hidden, &logits).ok());
    const double d = MaxAbsDiff(logits, want);
    EXPECT_LT(d, bound) << "rank " << c.rank() << " of " << c.size() << ": pipeline [0," << k
                        << ")+[" << k << "," << L << ")";
    worst = std::max(worst, d);
  }
  return worst;
}

// A sequence's logits are bit-identical alone and batched with another, under the split.
inline void CheckTpBatchInvariance(Collective& c, const ModelSource& src) {
  auto stage = Stage::Create(src, TpOptions(&c));
  ASSERT_TRUE(stage.ok()) << stage.status();
  const int32_t V = static_cast<int32_t>(src.config().vocab_size);
  const std::vector<int32_t> a = {1, 45 % V, 400 % V, 17 % V, 170 % V};
  const std::vector<int32_t> b = {1, 90 % V, 250 % V, 263 % V};
  const auto alone_a = AllLogits(**stage, a, 10);
  const auto alone_b = AllLogits(**stage, b, 11);
  Batch batch;
  for (size_t i = 0; i < 2; ++i) batch.push_back({b[i], 11, static_cast<int32_t>(i), true});
  for (size_t i = 0; i < a.size(); ++i) batch.push_back({a[i], 10, static_cast<int32_t>(i), true});
  std::vector<float> mixed;
  ASSERT_TRUE((*stage)->Forward(batch, {}, &mixed).ok());
  const size_t row = static_cast<size_t>(V) * sizeof(float);
  EXPECT_EQ(std::memcmp(mixed.data() + 2 * V, alone_a.data(), a.size() * row), 0)
      << "rank " << c.rank() << " of " << c.size();
  EXPECT_EQ(std::memcmp(mixed.data(), alone_b.data(), 2 * row), 0);
}

}  // namespace cascade::testing

#endif  // CASCADE_ENGINE_TP_TEST_UTIL_H_
