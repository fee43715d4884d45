// TpLeader / TpFollower: the ranks of one tensor-parallel stage, kept in lock-step. The
// leader (rank 0 of the group) is the process that registered with the coordinator as one
// worker: its StageHost loads and unloads through it, and its StageExecutor mirrors every
// frame through it before running it. The followers (ranks 1..T-1) run TpFollower::Run,
// which does the same to their slices. Commands are cascade.v1.TpCommand messages
// broadcast from the leader over the group's control collective (host memory); the
// stage's own all-reduces and all-gathers go over the compute collective (the same one on
// CPUs; NCCL between GPUs).
//
// Contract:
// - Load: BeginLoad broadcasts the request; every rank then loads its slice (a rank whose
//   stage is that very request keeps its weights and empties its KV cache, as StageHost
//   does); FinishLoad all-gathers the outcomes and returns OK only if every rank loaded,
//   else the first failure naming its rank, and then no rank keeps the stage.
// - Mirror sends a frame, as the leader's inbox decoded it, to the followers. Each frees
//   the frame's released sequences and runs it exactly when the leader does (no error and
//   some slots), so every rank's KV cache and collectives stay in step; the followers'
//   outputs are dropped (the leader's is the group's).
// - Unload drops every rank's stage; Stop ends the followers' loops. A broken group (a rank
//   gone) fails every later call with the reason; ending the job is the launcher's part.
// - TpLeader is thread-safe (calls are serialized). Run takes the calling thread.
#ifndef CASCADE_WORKER_TP_GROUP_H_
#define CASCADE_WORKER_TP_GROUP_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/mpi.pb.h"
#include "engine/stage.h"
#include "parallel/collective.h"
#include "worker/stage_executor.h"
#include "worker/stage_host.h"

namespace cascade {

class TpLeader : public FrameMirror {
 public:
  // Both collectives must be rank 0 of their groups and outlive the leader.
  TpLeader(Collective* control, Collective* compute) : control_(control), compute_(compute) {}
  int size() const { return control_->size(); }
  // The collective the leader's own Stage computes with (StageOptions::tp).
  Collective* compute() const { return compute_; }

  absl::Status BeginLoad(const v1::LoadStageRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // `mine`: the leader's own outcome.
  absl::Status FinishLoad(const absl::Status& mine) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Mirror(const StageFrame& frame) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Unload() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status Send(const v1::TpCommand& cmd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Collective* const control_;
  Collective* const compute_;
  absl::Mutex mu_;
  std::string link_key_ ABSL_GUARDED_BY(mu_);  // of the loaded stage's inbound link
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

class TpFollower {
 public:
  // `options` as the leader's StageHost has them (threads, device, model folder).
  TpFollower(Collective* control, Collective* compute, StageHostOptions options)
      : control_(control), compute_(compute), options_(std::move(options)) {}
  // Serves the leader's commands until Stop (OK) or the group breaks (the error).
  absl::Status Run();
  // The loaded stage (tests).
  Stage* stage() { return stage_.get(); }

 private:
  absl::Status Load(const v1::LoadStageRequest& req);
  void Process(const v1::ActivationFrame& wire);

  Collective* const control_;
  Collective* const compute_;
  const StageHostOptions options_;
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<Stage> stage_;
  std::optional<v1::LoadStageRequest> loaded_;
  FrameExpectations expect_;
  std::vector<float> buffer_;
};

}  // namespace cascade

#endif  // CASCADE_WORKER_TP_GROUP_H_
