// Helpers shared by the engine's tests that run a Stage on real or reference models.
//
// Contract: test-only (uses GoogleTest assertions; include from *_test.cc files). A failed
// forward pass is reported as a test failure and the helper returns what it has. Each
// helper frees the sequence it used, so a stage can be reused across calls.
#ifndef CASCADE_ENGINE_STAGE_TEST_UTIL_H_
#define CASCADE_ENGINE_STAGE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "generation/sampler.h"
#include "engine/stage.h"
#include "gtest/gtest.h"

namespace cascade::testing {

// Whitespace-separated token ids from a file (empty when it cannot be read).
inline std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

// Teacher-forced logits of every position, as one batch: (ids.size(), vocab).
inline std::vector<float> AllLogits(Stage& stage, const std::vector<int32_t>& ids, SeqId seq = 0) {
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], seq, static_cast<int32_t>(i), true});
  std::vector<float> out;
  absl::Status st = stage.Forward(b, {}, &out);
  EXPECT_TRUE(st.ok()) << st;
  stage.FreeSequence(seq);
  return out;
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return m;
}

// Greedy decoding, one token per forward pass, from `ids` (the prompt) to `total` tokens.
inline std::vector<int32_t> GreedyDecode(Stage& stage, std::vector<int32_t> ids, size_t total) {
  std::vector<float> logits;
  Batch prefill;
  for (size_t i = 0; i < ids.size(); ++i) {
    prefill.push_back({ids[i], 0, static_cast<int32_t>(i), i + 1 == ids.size()});
  }
  EXPECT_TRUE(stage.Forward(prefill, {}, &logits).ok());
  while (ids.size() < total) {
    const int32_t next = Sample(logits, SamplingParams::Greedy(), ids, ids.size()).token;
    ids.push_back(next);
    if (ids.size() == total) break;
    Batch b = {{next, 0, static_cast<int32_t>(ids.size() - 1), true}};
    EXPECT_TRUE(stage.Forward(b, {}, &logits).ok());
  }
  stage.FreeSequence(0);
  return ids;
}

}  // namespace cascade::testing

#endif  // CASCADE_ENGINE_STAGE_TEST_UTIL_H_
