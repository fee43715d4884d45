// StageExecutor: the loop that runs one pipeline stage. It takes frames from the inbound
// link in order, releases finished sequences, runs the Stage, and passes the result on:
// activations to the next stage, or (last stage) sampled tokens to the coordinator.
//
// Contract:
// - One thread (Start/Stop) owns the Stage. A batch that fails on this stage (refused by
//   Stage::Forward, e.g. an unknown sequence or a full KV cache) is reported downstream as
//   an error frame and, at the end of the pipeline, as a StepResult with an error; the
//   executor keeps serving the next frames.
// - Release lists travel with the frames, so a sequence's KV blocks are freed on every
//   stage in pipeline order, after any batch of it that was still in flight.
// - A sequence's sampling arrives once, in the frame that admits it; the last stage keeps
//   it (SequenceSamplers) until the sequence is released. A frame that asks the last stage
//   for a sequence it never admitted fails its batch, naming the sequence.
// - Stats() is thread-safe.
#ifndef CASCADE_WORKER_STAGE_EXECUTOR_H_
#define CASCADE_WORKER_STAGE_EXECUTOR_H_

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/stage.h"
#include "transport/link.h"
#include "util/histogram.h"
#include "worker/sequence_samplers.h"

namespace cascade {

// Sees every frame before the stage runs it: the leader of a tensor-parallel group sends
// it to the group's other ranks (worker/tp_group.h). A failure fails the frame's batch.
class FrameMirror {
 public:
  virtual ~FrameMirror() = default;
  virtual absl::Status Mirror(const StageFrame& frame) = 0;
};

struct ExecutorStats {
  uint64_t frames = 0;
  uint64_t tokens = 0;
  uint64_t failed_batches = 0;
  double busy_seconds = 0;  // wall time spent processing frames
  double cpu_seconds = 0;   // the executor thread's CPU time in them (not its pool threads')
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  uint64_t activation_bytes_in = 0;   // activation payload received
  uint64_t activation_bytes_out = 0;  // and sent to the next stage
  Histogram hop_in_seconds{LatencyBounds()};  // previous hop's send to this receive
};

class StageExecutor {
 public:
  // `out` is null for the last stage; `results` is used only by the last stage.
  StageExecutor(std::unique_ptr<Stage> stage, uint32_t stage_index, uint64_t plan_id,
                std::unique_ptr<ActivationReceiver> in, std::unique_ptr<ActivationSender> out,
                std::shared_ptr<ResultSender> results);
  ~StageExecutor();

  // Before Start: every frame goes to `mirror` first (null: none). It must outlive the
  // executor's thread.
  void SetMirror(FrameMirror* mirror) { mirror_ = mirror; }
  void Start();
  // Closes the inbound link and joins the thread (the frames already queued are processed),
  // then ends the outbound links: gracefully (what was sent reaches a live next stage or
  // coordinator; a send waiting on an unreachable one gives up at once), or, when the
  // neighbours may be dead (a plan being replaced), at once.
  void Stop(bool graceful = true);
  // After Stop: hands the Stage back (to serve the next plan without loading it again).
  std::unique_ptr<Stage> ReleaseStage();
  ExecutorStats Stats() const ABSL_LOCKS_EXCLUDED(stats_mu_);
  Stage& stage() { return *stage_; }

  // Processes one frame on the calling thread (the loop calls this; tests may too).
  void Process(StageFrame frame);

 private:
  // What one frame adds to the stats, gathered while it is handled and added under one
  // lock at its end (failures are counted at once, before they are reported).
  struct FrameStats {
    std::chrono::steady_clock::time_point t0;  // wall and thread CPU time at its arrival
    double cpu0 = 0;
    std::optional<double> hop;  // its hop from the previous stage, when timed
    uint64_t bytes_in = 0, bytes_out = 0;
    bool kv_released = false;  // sequences were freed
    bool computed = false;     // a forward pass ran over `tokens` tokens
    size_t tokens = 0;
  };
  void Loop();
  void Handle(StageFrame frame, FrameStats* fs);
  void Account(const FrameStats& fs) ABSL_LOCKS_EXCLUDED(stats_mu_);
  void Fail(const StageFrame& in, const std::string& error);

  std::unique_ptr<Stage> stage_;
  const uint32_t stage_index_;
  const uint64_t plan_id_;
  std::unique_ptr<ActivationReceiver> in_;
  std::unique_ptr<ActivationSender> out_;
  std::shared_ptr<ResultSender> results_;
  FrameMirror* mirror_ = nullptr;
  std::thread thread_;
  mutable absl::Mutex stats_mu_;
  ExecutorStats stats_ ABSL_GUARDED_BY(stats_mu_);
  std::vector<float> buffer_;
  SequenceSamplers samplers_;  // last stage: each running sequence's sampling
};

}  // namespace cascade

#endif  // CASCADE_WORKER_STAGE_EXECUTOR_H_
