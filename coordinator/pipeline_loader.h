// PipelineLoader: turns a plan into a running pipeline. It builds one LoadStage request per
// stage (layers, KV cache, the next stage's data address, where results go), mints a fresh
// key for every link of the plan (link i leads into stage i, link S from the last stage to
// the coordinator), loads every stage at once through the injected WorkerClient, and makes
// the link to the first stage through the injected sender factory. What it returns is the
// pipeline's description: what the scheduler attaches, what the result router checks
// results against, and where each stage is.
//
// Contract:
// - Holds no state of its own beyond its options: each Load is independent, and loads of
//   different plans may run at once from different threads. Thread-safe.
// - Load blocks until every stage has loaded or failed. It fails when any stage fails to
//   load (the status names the stage and worker; `failed_workers` lists every worker whose
//   load failed, so the caller can plan without them) or when the first stage's link cannot
//   be made (`failed_workers` stays empty then). A failed Load leaves the stages that did
//   load as they are: unloading them is the caller's decision.
// - Every external effect goes through the WorkerClient and the sender factory, so it is
//   tested with fakes and no network.
#ifndef CASCADE_COORDINATOR_PIPELINE_LOADER_H_
#define CASCADE_COORDINATOR_PIPELINE_LOADER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cascade/v1/control_plane.pb.h"
#include "coordinator/cluster_config.h"
#include "coordinator/planner.h"
#include "coordinator/registry.h"
#include "serving/scheduler.h"
#include "transport/link.h"

namespace cascade {

// How the coordinator reaches the workers' control services.
class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // Blocks until the worker has loaded the stage (or failed to).
  virtual absl::Status LoadStage(const WorkerRecord& worker, const v1::LoadStageRequest& req) = 0;
  virtual absl::Status Unload(const WorkerRecord& worker, uint64_t plan_id) = 0;
  // Whether the worker's control service answers now (a short deadline).
  virtual absl::Status Probe(const WorkerRecord& worker) = 0;
};

// Makes the link to a pipeline's first stage from its data-plane address and link key.
using SenderFactory = std::function<absl::StatusOr<std::unique_ptr<ActivationSender>>(
    const std::string& address, const SenderOptions& options)>;

// Where a worker's stage takes frames: its TCP or MPI data address when the data plane is
// not gRPC and the worker offers one, else its gRPC StagePipe (its control address).
std::string StageDataAddress(DataPlane data_plane, const WorkerSpec& worker);

// A plan to load: the planner's output, the workers it indexes, and the plan's id.
struct PipelineTarget {
  uint64_t plan_id = 0;
  Plan plan;
  std::vector<WorkerSpec> workers;  // indexed by StagePlan::worker
};

// One stage of a loaded pipeline.
struct PipelineStage {
  std::string worker_id;
  std::string data_address;  // where the previous stage (or the scheduler) sends its frames
};

// A loaded pipeline.
struct LoadedPipeline {
  // What the scheduler attaches: plan id, stages, KV budget, batch size, first stage's link.
  PipelineSpec spec;
  std::vector<PipelineStage> stages;
  // One per link: link_keys[i] leads into stage i, link_keys.back() carries the results.
  std::vector<std::string> link_keys;
  uint64_t plan_id() const { return spec.plan_id; }
  const std::string& results_key() const { return link_keys.back(); }
};

struct PipelineLoaderOptions {
  std::string model_path;       // as the workers open it
  std::string results_address;  // where the last stage sends results
  DataPlane data_plane = DataPlane::kTcp;
  StageConfig stage;  // threads, device, quantized activations of every stage
};

class PipelineLoader {
 public:
  // `workers` must outlive the loader.
  PipelineLoader(PipelineLoaderOptions options, WorkerClient* workers, SenderFactory make_sender);

  // The LoadStage request of every stage of `target`, chained by data address and by
  // `link_keys` (plan.stages.size() + 1 of them). Pure.
  std::vector<v1::LoadStageRequest> MakeRequests(const PipelineTarget& target,
                                                 const std::vector<std::string>& link_keys) const;

  // Loads every stage of `target` at once, on `stage_workers[i]` for stage i (the registry's
  // records of the plan's workers), then makes the link to the first stage.
  absl::StatusOr<LoadedPipeline> Load(const PipelineTarget& target,
                                      const std::vector<WorkerRecord>& stage_workers,
                                      std::vector<std::string>* failed_workers) const;

 private:
  // Runs every load at once; the first failure, with the workers whose loads failed.
  absl::Status LoadAll(const std::vector<v1::LoadStageRequest>& requests,
                       const std::vector<WorkerRecord>& stage_workers,
                       std::vector<std::string>* failed_workers) const;

  const PipelineLoaderOptions options_;
  WorkerClient* const workers_;
  const SenderFactory make_sender_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_PIPELINE_LOADER_H_
