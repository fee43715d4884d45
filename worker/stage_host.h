// StageHost: the pipeline stage a worker holds, and its life: load (validate the request,
// open the model, bind this stage's layers on the requested device, connect to the next
// stage or the coordinator), serve (its StageExecutor runs the frames the FrameRouter
// delivers), drain and unload. The Worker gRPC service is a thin adapter over it.
//
// Contract:
// - Load validates the request before it touches anything (InvalidArgument naming the
//   field); a failed load leaves the worker without a stage, in WORKER_STATE_FAILED with
//   the reason, and it may be loaded again. A load replaces any loaded stage: the old
//   executor finishes the frames it holds first.
// - Loading takes no lock that status and heartbeats need: they report LOADING meanwhile.
// - A load that asks for the stage already loaded (same model, layers, cache and device;
//   a new plan after another stage was lost) keeps its weights: only the KV cache is
//   emptied and the links and plan id change, in milliseconds.
// - Drain refuses new frames at once, finishes the queued ones, unloads, and reports IDLE.
// - With a TpLeader (options.tp) the stage is rank 0 of a tensor-parallel group: a load
//   is sent to the group's other ranks and succeeds only if every rank loads its slice
//   (worker/tp_group.h); unloading and draining unload them too, and every frame is
//   mirrored to them before it runs.
// - Thread-safe.
#ifndef CASCADE_WORKER_STAGE_HOST_H_
#define CASCADE_WORKER_STAGE_HOST_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.pb.h"
#include "model/model_source.h"
#include "tensor/device.h"
#include "transport/inbox.h"
#include "worker/stage_executor.h"

namespace cascade {

class TpLeader;

struct StageHostOptions {
  int threads = 1;                              // unless the request says otherwise
  DeviceSpec device{DeviceKind::kAuto, 0};      // unless the request says otherwise
  std::string model_dir;  // models are opened only under this folder ("" = anywhere)
  TpLeader* tp = nullptr;  // the group this host leads (must outlive it); null: none
};

// What a LoadStage request means for a stage, shared by StageHost and the followers of a
// tensor-parallel group (worker/tp_group.h), so that every rank reads it the same way.
// The same stage, but for the plan id and the links: its weights can stay.
bool SameStageRequest(const v1::LoadStageRequest& a, const v1::LoadStageRequest& b);
StageOptions StageOptionsFor(const v1::LoadStageRequest& req, const StageHostOptions& host);
DeviceSpec DeviceFor(const v1::LoadStageRequest& req, const StageHostOptions& host);
// What the stage's inbox accepts.
FrameExpectations ExpectationsFor(const v1::LoadStageRequest& req, const ModelConfig& c);

class StageHost {
 public:
  // `router` must outlive the host; the host points it at the loaded stage's inbox.
  StageHost(StageHostOptions options, FrameRouter* router);
  ~StageHost();

  absl::StatusOr<v1::LoadStageResponse> Load(const v1::LoadStageRequest& req)
      ABSL_LOCKS_EXCLUDED(load_mu_, mu_);
  // Unloads the stage of `plan_id` (0: whatever is loaded). NotFound for another plan.
  absl::Status Unload(uint64_t plan_id) ABSL_LOCKS_EXCLUDED(load_mu_, mu_);
  void Drain() ABSL_LOCKS_EXCLUDED(load_mu_, mu_);

  void FillStatus(v1::WorkerStatus* out) const ABSL_LOCKS_EXCLUDED(mu_);
  void FillHeartbeat(v1::HeartbeatRequest* out) const ABSL_LOCKS_EXCLUDED(mu_);
  v1::WorkerState state() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status Validate(const v1::LoadStageRequest& req) const;
  // Stops the executor (it finishes its queued frames) and forgets the stage; `graceful`
  // as StageExecutor::Stop. Returns the stage when `keep` (else it is destroyed).
  std::unique_ptr<Stage> StopStage(bool graceful, bool keep = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  void FillStats(v1::StageStats* out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells a tensor-parallel group's other ranks to drop their slices.
  void UnloadGroup() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);

  const StageHostOptions options_;
  FrameRouter* const router_;

  // Serializes Load/Unload/Drain; held for a whole load.
  absl::Mutex load_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<ModelSource> source_ ABSL_GUARDED_BY(load_mu_);
  std::string source_path_ ABSL_GUARDED_BY(load_mu_);
  std::shared_ptr<FrameInbox> inbox_ ABSL_GUARDED_BY(load_mu_);
  std::optional<v1::LoadStageRequest> loaded_ ABSL_GUARDED_BY(load_mu_);  // what runs now

  // What status and heartbeats read; held only briefly.
  mutable absl::Mutex mu_;
  std::unique_ptr<StageExecutor> executor_ ABSL_GUARDED_BY(mu_);
  v1::WorkerState state_ ABSL_GUARDED_BY(mu_) = v1::WORKER_STATE_IDLE;
  std::string error_ ABSL_GUARDED_BY(mu_);
  uint64_t plan_id_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t stage_index_ ABSL_GUARDED_BY(mu_) = -1;
  LayerRange range_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_WORKER_STAGE_HOST_H_
