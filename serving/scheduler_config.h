// SchedulerConfig: the scheduler's settings, each default written once here. The
// coordinator's configuration tree (coordinator/cluster_config.h) holds one and exposes
// every field as a flag and a cluster-file key; LocalEngine takes one as it is.
// Plain data; thread-compatible.
#ifndef CASCADE_SERVING_SCHEDULER_CONFIG_H_
#define CASCADE_SERVING_SCHEDULER_CONFIG_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace cascade {

// Speculative decoding (serving/scheduler.h): how drafts are made.
enum class Speculative {
  kOff,
  kNgram,  // prompt lookup (serving/ngram_drafter.h): no draft model
  kDraft,  // a small model with the same vocabulary (engine/draft_model.h)
};

// "off", "ngram", "draft": the names flags and files use.
const char* SpeculativeName(Speculative s);
absl::StatusOr<Speculative> SpeculativeFromName(std::string_view name);

// Batches with more running sequences than this draft nothing: they are compute-bound, and
// a rejected draft costs a position's compute.
inline constexpr int kSpecMaxRunning = 8;

struct SchedulerConfig {
  int64_t prefill_chunk = 256;  // prompt tokens of one sequence per micro-batch
  int max_running = 64;         // sequences admitted at once
  int max_waiting = 256;        // queued requests beyond which Submit refuses
  bool prefix_cache = true;     // reuse the KV blocks of prompts seen before (prefix_cache.h)
  // On by default: drafts that fail cost a stream nothing measurable and busy batches
  // draft nothing (docs/benchmarks.md, issue 44); the text is the same either way.
  Speculative speculative = Speculative::kNgram;
  int spec_tokens = 4;  // drafted tokens a sequence verifies per trip, at most
};

}  // namespace cascade

#endif  // CASCADE_SERVING_SCHEDULER_CONFIG_H_
