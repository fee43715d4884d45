// Helpers for tests that run requests through a scheduler over a FakePipeline
// (serving/fake_pipeline.h): a seeded request, the ids an undisturbed run of it gives,
// and reading a stream to its end.
//
// Test-only. Thread-compatible.
#ifndef CASCADE_COORDINATOR_STREAM_TEST_UTIL_H_
#define CASCADE_COORDINATOR_STREAM_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "serving/fake_pipeline.h"
#include "serving/scheduler.h"

namespace cascade::testing {

// A three-token prompt sampled with `seed`.
inline SequenceRequest SeededRequest(int max_tokens, uint64_t seed) {
  SequenceRequest r;
  r.prompt = {1, 403, 407};
  r.max_tokens = max_tokens;
  r.sampling.seed = seed;
  return r;
}

// The first `n` ids the fake pipeline gives SeededRequest(n, seed), however it is batched,
// interrupted or resumed.
inline std::vector<int32_t> UndisturbedIds(uint64_t seed, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(FakePipeline::TokenFor(seed, 3 + i));
  return ids;
}

struct StreamOutput {
  std::vector<int32_t> ids;
  absl::Status status;  // the last event's; DeadlineExceeded when an event took over 30 s
};

inline StreamOutput ReadToEnd(RequestStream& s) {
  StreamOutput o;
  for (;;) {
    auto e = s.Next(std::chrono::seconds(30));
    if (!e) return {o.ids, absl::DeadlineExceededError("no event in 30 s")};
    o.ids.insert(o.ids.end(), e->ids.begin(), e->ids.end());
    if (e->last) {
      o.status = e->status;
      return o;
    }
  }
}

}  // namespace cascade::testing

#endif  // CASCADE_COORDINATOR_STREAM_TEST_UTIL_H_
