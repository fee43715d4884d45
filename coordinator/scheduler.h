// Scheduler: continuous batching over a pipeline of S stages.
//
// Each iteration it forms micro-batches from the running sequences (one decode token per
// sequence, or a chunk of its prompt: chunked prefill), keeps up to S micro-batches in
// flight so that every stage works at once, and turns the sampled tokens that come back
// into text for each client (stop strings, max tokens, EOS). New sequences join between
// iterations and finished ones leave; admission reserves KV blocks for a sequence's whole
// length (prompt + max_tokens), so an admitted sequence never runs out of cache.
//
// Contract:
// - Submit() validates the request (INVALID_ARGUMENT naming the problem), refuses at once
//   with RESOURCE_EXHAUSTED when the waiting queue is full, and otherwise returns the
//   RequestStream the caller reads events from. Thread-safe.
// - OnResult() is called by the link from the last stage; any thread.
// - All sequence state is owned by the scheduler thread (Start/Stop); the other entry
//   points only post to its inbox. A finished or cancelled sequence's KV blocks are
//   released on every stage by the next frame (or a release-only frame) it sends.
// - Greedy and seeded sampling give the same tokens as a single-process run: stages are
//   batch-invariant and draws are counter-based (engine/sampler.h).
#ifndef CASCADE_COORDINATOR_SCHEDULER_H_
#define CASCADE_COORDINATOR_SCHEDULER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "coordinator/request_stream.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"
#include "model/tokenizer.h"
#include "worker/activation_channel.h"

namespace cascade {

struct SchedulerOptions {
  uint64_t plan_id = 1;
  int num_stages = 1;
  int64_t kv_blocks = 0;  // blocks every stage holds (the admission budget)
  int kv_block_size = 16;
  int64_t max_batch_tokens = 512;  // tokens per micro-batch
  int64_t prefill_chunk = 256;     // prompt tokens of one sequence per micro-batch
  int max_running = 64;            // sequences admitted at once
  int max_waiting = 256;           // queued requests beyond which Submit refuses
  int64_t context_length = 0;
  int64_t vocab_size = 0;
  int32_t max_tokens_limit = 1 << 20;  // absurd max_tokens are refused
};

struct SequenceRequest {
  std::vector<int32_t> prompt;  // ids (BOS included when wanted)
  SamplingParams sampling;
  int32_t max_tokens = 0;  // 0: up to the context
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool logprobs = false;
};

struct SchedulerStats {
  int64_t waiting = 0;
  int64_t running = 0;
  int64_t in_flight_batches = 0;
  int64_t kv_blocks_reserved = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t rejected = 0;
  uint64_t generated_tokens = 0;
  uint64_t prompt_tokens = 0;
  uint64_t batches = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, const Tokenizer& tokenizer,
            std::shared_ptr<ActivationSender> to_first_stage);
  ~Scheduler();

  void Start();
  // Stops the scheduler thread and closes the link to the first stage (a send in progress
  // gives up); requests still running or waiting end with UNAVAILABLE.
  void Stop();

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(SequenceRequest request);
  void OnResult(StepResult result);
  // Fails every running and waiting sequence (e.g. the pipeline broke) with `status`.
  void FailAll(const absl::Status& status);

  SchedulerStats Stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Sequence {
    SeqId id = 0;
    SequenceRequest req;
    std::vector<int32_t> tokens;  // prompt, then generated
    int32_t prompt_len = 0;
    int32_t processed = 0;  // tokens whose KV entries exist on every stage
    int32_t max_total = 0;  // prompt_len + max tokens, capped by the context
    int64_t blocks = 0;     // reserved KV blocks
    bool in_flight = false;
    std::unique_ptr<TextStream> text;
    std::shared_ptr<RequestStream> stream;
    Clock::time_point submitted, first_token;
    bool got_first = false;
  };
  struct Pending {
    std::shared_ptr<RequestStream> stream;
    SequenceRequest req;
    Clock::time_point submitted;
    int64_t blocks = 0;
  };
  struct Flight {
    std::vector<std::pair<SeqId, int32_t>> seqs;  // sequence, processed after this batch
  };

  void Loop();
  void Admit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleResult(const StepResult& r);
  // Ends every sequence of in-flight batch `batch_id` with `status`.
  void FailFlight(uint64_t batch_id, const absl::Status& status);
  void Finish(Sequence& s, FinishReason reason, const absl::Status& status);
  bool SendBatch();
  void SendReleases();
  void CheckCancellations();

  const SchedulerOptions options_;
  const Tokenizer& tokenizer_;
  std::shared_ptr<ActivationSender> out_;

  // Inbox, shared with other threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> waiting_ ABSL_GUARDED_BY(mu_);
  std::deque<StepResult> results_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fail_all_ ABSL_GUARDED_BY(mu_);
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t blocks_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_count_ ABSL_GUARDED_BY(mu_) = 0;

  // Owned by the scheduler thread.
  std::map<SeqId, Sequence> running_;
  std::map<uint64_t, Flight> flights_;
  std::vector<SeqId> release_;
  SeqId next_seq_ = 1;
  uint64_t next_batch_ = 1;
  size_t rr_cursor_ = 0;  // round-robin start for batch formation
  std::thread thread_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_SCHEDULER_H_
