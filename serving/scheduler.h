// Scheduler: continuous batching over a pipeline of S stages.
//
// Each iteration it forms micro-batches from the running sequences (one decode token per
// sequence, or a chunk of its prompt: chunked prefill), keeps up to S micro-batches in
// flight so that every stage works at once, and turns the sampled tokens that come back
// into text for each client (generation/sequence.h: stop strings, max tokens, EOS). New
// sequences join between iterations and finished ones leave; admission reserves KV blocks
// for a sequence's whole length (prompt + max_tokens), so an admitted sequence never runs
// out of cache.
//
// The pipeline is attached, not owned for life: Attach() gives the scheduler a pipeline
// (its first stage's link and its shape); Detach() takes it away and keeps every sequence,
// rewound to be prefilled again (prompt + the tokens already streamed) on the next pipeline,
// which continues each stream exactly where it stopped (draws are counter-based, stages
// batch-invariant); FailAll() ends every sequence instead.
//
// Contract:
// - Submit() validates the request (INVALID_ARGUMENT naming the problem), refuses at once
//   with RESOURCE_EXHAUSTED when the waiting queue is full or UNAVAILABLE when it no longer
//   admits (StopAdmitting), and otherwise returns the RequestStream the caller reads
//   events from. Thread-safe.
// - OnResult() is called by the link from the last stage; any thread. Results of another
//   plan or of unknown batches are ignored.
// - A batch that gets no result within `timeouts.batch` is lost: its sequences are sent
//   again (the stages' KV caches rewind), never waited on forever.
// - A send to the first stage that fails loses nothing either: its sequences wait and are
//   sent again every `timeouts.link_retry`, and the link-error handler is told (the
//   controller finds out whether the stage is gone and re-plans). Only when the link stays
//   down for `timeouts.link_grace` with no new pipeline do the requests end UNAVAILABLE.
// - All sequence state is owned by the scheduler thread (Start/Stop); the other entry
//   points only post to its inbox. A finished or cancelled sequence's KV blocks are
//   released on every stage by the next frame (or a release-only frame) it sends.
// - Prefix cache (config.prefix_cache; serving/prefix_cache.h): a sequence admitted with
//   a prompt whose leading full blocks the pipeline holds starts after them (its first
//   frame tells every stage to attach them) and reserves only the blocks it adds. After
//   each batch's result, the blocks it filled are cached (its frame told the stages to
//   name them), so the next sequence with that prefix skips them. Cached blocks count
//   against the KV budget; admission evicts unused ones, least recently used first,
//   before a request waits. A request whose next prompt block a running sequence is
//   computing waits until that block is cached (one prefill of a shared beginning,
//   not one per request). A batch with an attached prefix that fails is sent again
//   once, without the prefix (the stage lacked a block the books said it held); any
//   other batch that fails ends its sequences. A new pipeline starts with no cache.
// - HandOver(to) moves every sequence (rewound, with what it streamed) and every waiting
//   request to `to`, another scheduler over the same model (a replica that serves): it
//   takes them up as a new pipeline would, so each stream continues with the same text.
//   The carried sequences are admitted there before its own waiting requests, as its KV
//   budget allows; one longer than its whole cache ends with RESOURCE_EXHAUSTED.
// - Speculative decoding (config.speculative): a decoding sequence may send, after its last
//   token, up to spec_tokens drafted tokens as one chunk. Drafts come from the scheduler's
//   Drafter (generation/drafter.h): prompt lookup (serving/ngram_drafter.h) for kNgram, or
//   the one SetDrafter gave (a draft model, engine/draft_model.h) for kDraft, without
//   which nothing is drafted; the last stage samples every position, and the scheduler keeps the samples while
//   each draft equals the sample before it, so the text is exactly the one without
//   speculation (draws are counter-based: a position's sample depends only on the seed, the
//   position and the logits). Its next frame starts after the accepted tokens: every stage
//   rewinds its cache past them. A sequence's draft length adapts to what it has accepted
//   (it starts at 1, grows by one after a step that kept every draft up to spec_tokens,
//   halves after one that kept none, and stops below 20% after 16 drafts); batches of more than kSpecMaxRunning
//   sequences draft nothing (compute-bound). Only confirmed blocks are published.
// - Logs at info one line per finished request (id, prompt and output tokens, time to
//   first token, decode tokens/s, finish reason) and, every kThroughputLogInterval while
//   there is activity, prompt and generation throughput, running, waiting and KV use.
#ifndef CASCADE_SERVING_SCHEDULER_H_
#define CASCADE_SERVING_SCHEDULER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "generation/drafter.h"
#include "serving/prefix_cache.h"
#include "serving/request_stream.h"
#include "serving/scheduler_config.h"
#include "serving/serving_metrics.h"
#include "serving/sequence.h"
#include "model/tokenizer.h"
#include "transport/link.h"

namespace cascade {

// A pipeline the scheduler sends batches to.
struct PipelineSpec {
  uint64_t plan_id = 0;
  int num_stages = 1;
  int64_t kv_blocks = 0;  // blocks every stage holds (the admission budget)
  int kv_block_size = kDefaultKvBlockSize;
  int64_t max_batch_tokens = kDefaultMaxBatchTokens;
  std::shared_ptr<ActivationSender> first_stage;
};

// How often the scheduler logs its throughput line (while there is activity).
constexpr std::chrono::seconds kThroughputLogInterval{10};

struct SchedulerTimeouts {
  std::chrono::milliseconds batch{120000};       // a batch without a result by then is lost
  std::chrono::milliseconds link_retry{200};     // after a failed send to the first stage
  std::chrono::milliseconds link_grace{15000};   // a first stage unreachable this long: fail
};

struct SchedulerStats {
  int64_t waiting = 0;
  int64_t running = 0;
  int64_t in_flight_batches = 0;
  int64_t kv_blocks_reserved = 0;
  int64_t kv_blocks_total = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t rejected = 0;
  uint64_t generated_tokens = 0;
  uint64_t prompt_tokens = 0;
  uint64_t batches = 0;
  uint64_t lost_batches = 0;  // timed out and sent again
  uint64_t resumed = 0;       // sequences carried over to a new pipeline
  uint64_t handed_over = 0;   // sequences and requests moved to another replica
  // Speculative decoding: tokens drafted and verified, and of those accepted.
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  // Prefix cache: prompt tokens looked up and found cached, since start; blocks cached
  // now, and of those the ones running sequences use.
  uint64_t prefix_queried_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  int64_t prefix_blocks_cached = 0;
  int64_t prefix_blocks_in_use = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, const Tokenizer& tokenizer, int64_t context_length,
            int64_t vocab_size, SchedulerTimeouts timeouts = {});
  ~Scheduler();

  // Called on the scheduler's thread when a send to the first stage fails. Set before Start.
  void SetLinkErrorHandler(std::function<void(const absl::Status&)> fn) { on_link_error_ = std::move(fn); }
  // Where drafts come from (replacing the prompt lookup of kNgram). Set before Start;
  // ignored with speculation off (a drafter exists only where speculation is on).
  void SetDrafter(std::unique_ptr<Drafter> drafter) {
    if (config_.speculative != Speculative::kOff) drafter_ = std::move(drafter);
  }
  void Start();
  // Stops the scheduler thread and closes the pipeline's link (a send in progress gives
  // up); requests still running or waiting end with UNAVAILABLE.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  void Attach(PipelineSpec pipeline) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops using the pipeline (its link is closed); sequences wait, rewound, for the next.
  void Detach(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every running and waiting sequence with `status`; the pipeline stays attached.
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // From now on Submit answers UNAVAILABLE with `why`; what runs or waits goes on.
  void StopAdmitting(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves every sequence and waiting request to `to` (see the contract); the pipeline, if
  // one is attached, is detached first. Posted: applied on this scheduler's thread.
  void HandOver(std::shared_ptr<Scheduler> to) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(SequenceRequest request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Request counts, tokens and latency histograms since the scheduler started.
  ServingMetrics::Snapshot Metrics() const { return metrics_.Take(); }
  ServingMetrics& metrics() { return metrics_; }
  void OnResult(StepResult result) ABSL_LOCKS_EXCLUDED(mu_);

  SchedulerStats Stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // For routing (serving/router.h), from any thread: how many leading tokens of `prompt`
  // the attached pipeline holds in its prefix cache, in whole blocks, as far as the
  // scheduler's books say (0 without a cache). A guess: it may be stale at once.
  int64_t CachedPrefixTokens(std::span<const int32_t> prompt) const {
    return view_.CachedTokens(prompt);
  }
  // True when nothing runs or waits.
  bool Idle() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  struct Running {
    SeqId id = 0;
    std::unique_ptr<Sequence> seq;
    int32_t processed = 0;  // tokens whose KV entries exist on every stage
    int64_t blocks = 0;     // reserved KV blocks (besides the cached ones it uses)
    bool in_flight = false;
    bool announced = false;  // the pipeline has its sampling (and prefix): a result came
    bool resent = false;     // sent again after a failed batch once already
    // Prefix cache: the cached blocks it started from (attached with its first frame),
    // the cached blocks it uses (those and the ones it filled and published), and the
    // names of its full blocks so far.
    std::vector<BlockName> prefix;
    // The cached block after those whose first rows it starts from (a copy of them; the
    // block is in `uses` while it runs).
    PrefixCache::PartialHit partial;
    int32_t cached_tokens = 0;  // prompt tokens it took from the cache (usage)
    std::vector<BlockName> uses;
    std::vector<BlockName> names;
    // Its prompt's blocks it computes and will publish (while not yet published).
    std::vector<BlockName> computing;
    std::shared_ptr<RequestStream> stream;  // null once finished
    Clock::time_point submitted, admitted, first_token, last_token;
    bool got_first = false;
    // Blocks ending before this position were offered for publication (PublishFilled).
    int32_t publish_from = 0;
    // Speculative decoding: tokens it drafts per step now (adaptive; 0: off for it), and
    // what it drafted and had accepted so far.
    int spec_k = 0;
    uint64_t spec_drafted = 0, spec_accepted = 0;
    // Forgets what it had on a pipeline (its KV entries, cached blocks, flights) so that
    // it is prefilled again, prompt and generated tokens, on the next one.
    void Rewind() {
      processed = 0;
      in_flight = false;
      announced = false;
      resent = false;
      prefix.clear();
      partial = {};
      cached_tokens = 0;
      uses.clear();
      names.clear();
      computing.clear();
      publish_from = 0;
    }
  };
  struct Pending {
    std::shared_ptr<RequestStream> stream;
    SequenceRequest req;
    Clock::time_point submitted;
    // Its prompt's usable full blocks' names (PrefixFor), for blocks of names_block_size.
    std::vector<BlockName> names;
    int names_block_size = 0;
  };
  struct Flight {
    std::vector<std::pair<SeqId, int32_t>> seqs;  // sequence, processed after this batch
    // Speculative decoding: each speculating sequence's drafted tokens (its slots after its
    // last token); processed grows by those accepted.
    std::map<SeqId, std::vector<int32_t>> drafts;
    std::vector<BlockPublish> publish;            // blocks cached once the result is in
    bool attaches = false;                        // carries a prefix attachment
    Clock::time_point deadline;
  };
  // A sequence or waiting request moved from another scheduler (HandOver): a sequence
  // (seq set) resumes from its start; a request (seq null) waits as if submitted here.
  struct Carried {
    Running running;  // a sequence (running.seq set), rewound
    Pending pending;  // or a request
    bool is_sequence() const { return running.seq != nullptr; }
  };
  // What other threads post to the scheduler thread.
  struct Inbox {
    std::deque<StepResult> results;
    absl::Status fail_all;
    absl::Status detach;
    std::optional<PipelineSpec> attach;
    std::shared_ptr<Scheduler> hand_over;
    std::vector<Carried> adopted;
  };

  absl::StatusOr<std::shared_ptr<RequestStream>> Enqueue(SequenceRequest request)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t BlocksFor(int32_t prompt_len, int32_t max_tokens) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Admit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits carried sequences (carried_) while the budget holds them; false when one waits.
  bool AdmitCarried() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // HandOver's two halves: this scheduler gives everything up; `to` takes it in.
  void ApplyHandOver(std::shared_ptr<Scheduler> to);
  void Adopt(std::vector<Carried> carried) ABSL_LOCKS_EXCLUDED(mu_);
  void ApplyAdopt(std::vector<Carried> carried);
  // The tokens `req` may generate on the attached pipeline (ResolveMaxTokens over the
  // context, or the KV cache where it holds less); InvalidArgument when its prompt (plus
  // the max_tokens it asked for) does not fit the cache.
  absl::StatusOr<int32_t> MaxTokensFor(const SequenceRequest& req) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyAttach(PipelineSpec p);
  void ApplyDetach(const absl::Status& why);
  void ApplyFailAll(const absl::Status& why);
  void HandleResult(const StepResult& r);
  void ExpireFlights(Clock::time_point now);
  void FailFlight(uint64_t batch_id, const absl::Status& status);
  // Prefix cache: what admission finds for a prompt. kAdmit: its leading cached blocks
  // (each referenced) and room made for `blocks` more by evicting unused ones; kComputing: the first block after the cached ones
  // is being computed by a running sequence (wait for it); kNoRoom: it does not fit the
  // budget. Nothing is referenced unless kAdmit.
  struct PrefixLookup {
    enum Outcome { kAdmit, kComputing, kNoRoom } outcome = kAdmit;
    int64_t hits = 0;  // leading blocks of p.names (PrefixFor names the prompt's blocks)
    PrefixCache::PartialHit partial;  // the rows of the next block it takes from the cache
  };
  PrefixLookup PrefixFor(Pending& p, int64_t blocks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `blocks` more fit the KV budget beside the reservations and the cached blocks,
  // evicting unused cached blocks (least recently used first) to make them fit.
  bool MakeRoom(int64_t blocks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `s` no longer computes block `name` (all of its blocks when null) for others to wait on.
  void DoneComputing(Running& s, const BlockName* name);
  // Adds the blocks a chunk [s.processed, end) fills to `frame` and `flight` as
  // publications, naming them.
  void PublishFilled(SeqId id, Running& s, int32_t end, StageFrame& frame, Flight& flight);
  // Caches the blocks a batch filled (its result came).
  void ApplyPublished(const Flight& flight);
  // A new, empty cache for blocks of `block_size` (0: none), as a new pipeline's stages
  // hold none.
  void ResetPrefixCache(int block_size);
  // The cache's block counts into stats_.
  void NotePrefixBlocks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A sequence's prefix is dropped: it is released on the stages and computed again.
  void DropPrefix(SeqId id, Running& s);
  void Finish(Running& s, FinishReason reason, const absl::Status& status);
  // Every kThroughputLogInterval while there is activity, an info line: prompt and
  // generation tokens/s over the interval, running, waiting, KV cache use.
  void LogThroughput(Clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);
  bool SendBatch();
  // The tokens `s` drafts for this step (none unless it decodes and speculation is on for
  // it), at most `budget` of them.
  std::vector<int32_t> Draft(const Running& s, int64_t active, int64_t budget);
  // A result's tokens for one sequence, in position order: the first is its next token;
  // each later one counts while the draft before it matched. Returns how many drafts
  // were accepted.
  int AcceptSampled(Running& s, std::span<const SampledToken> sampled,
                    const std::vector<int32_t>* drafts, ServingMetrics::Step& times);
  void OnSendFailed(uint64_t batch_id, const absl::Status& st);
  void SendReleases();
  void CheckCancellations();
  void EndWaiting(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SchedulerConfig config_;
  const Tokenizer& tokenizer_;
  const int64_t context_length_;
  const int64_t vocab_size_;
  const SchedulerTimeouts timeouts_;
  std::function<void(const absl::Status&)> on_link_error_;
  ServingMetrics metrics_;

  // Shared with other threads.
  mutable absl::Mutex mu_;
  std::deque<Pending> waiting_ ABSL_GUARDED_BY(mu_);
  Inbox inbox_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status not_admitting_ ABSL_GUARDED_BY(mu_);
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);
  // The budget Submit and Admit check against (the attached pipeline's).
  int64_t kv_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  int kv_block_size_ ABSL_GUARDED_BY(mu_) = kDefaultKvBlockSize;
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  // The attached pipeline's link, for Stop/Detach to unblock a Send stuck connecting.
  std::shared_ptr<ActivationSender> link_ ABSL_GUARDED_BY(mu_);
  int64_t blocks_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  // Admission left requests waiting that only a later event (a result, a finish, a new
  // request) can admit: the loop does not spin on them.
  bool admission_held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t running_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Carried> carried_ ABSL_GUARDED_BY(mu_);  // handed over, waiting for room

  // The names the prefix cache holds, for CachedPrefixTokens on other threads; the cache
  // (prefix_) keeps it up to date.
  PrefixView view_;

  // Owned by the scheduler thread.
  std::optional<PipelineSpec> pipeline_;
  std::map<SeqId, Running> running_;
  std::map<uint64_t, Flight> flights_;
  std::vector<SeqId> release_;
  std::unique_ptr<PrefixCache> prefix_;  // null: off, or no pipeline yet
  std::unique_ptr<Drafter> drafter_;     // null: nothing is drafted
  std::vector<BlockName> evict_;         // names the stages drop with the next frame
  std::map<BlockName, int> computing_;   // prompt blocks running sequences will publish
  SeqId next_seq_ = 1;
  uint64_t next_batch_ = 1;
  size_t rr_cursor_ = 0;  // round-robin start for batch formation
  // Since when sends to the first stage fail (none while it works), and when to try again.
  std::optional<Clock::time_point> link_down_since_;
  Clock::time_point retry_at_{};
  // The counters at the last throughput line.
  struct ThroughputMark {
    Clock::time_point at;
    uint64_t prompt_tokens = 0, generated_tokens = 0;
  };
  ThroughputMark throughput_log_{Clock::now()};
  std::thread thread_;
};

}  // namespace cascade

#endif  // CASCADE_SERVING_SCHEDULER_H_
