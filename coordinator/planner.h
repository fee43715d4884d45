// Planner: a pure function from (model profile, workers, limits) to a pipeline plan, the
// stages with their layer ranges and the memory each worker needs (weights + KV cache +
// activations/workspace).
//
// Policy:
// - Use the fewest stages that fit (but at least min_stages): one worker when the model
//   fits on one (the one with the most memory, then the fastest); otherwise try 2, 3, ...
//   workers, preferring those with the most memory.
// - Balance layers by each worker's speed (gflops) within what its memory holds, so that
//   the slowest stage is as fast as it can be: faster and larger workers get more layers,
//   and the last stage, which also runs the output head (counted as layers of the same
//   weight bytes), gets fewer; stage order follows the workers' listed order.
// - A plan that does not fit is refused with the shortfall named (which resource, how
//   much is needed, how much the workers offer).
// - A worker with tp > 1 is a tensor-parallel group on one node: its stage is split over
//   its ranks, and what must fit is each rank's share in each rank's memory
//   (StageMemoryPerRank); a group size the model cannot be split by is an error naming it.
// Pure and thread-safe.
#ifndef CASCADE_COORDINATOR_PLANNER_H_
#define CASCADE_COORDINATOR_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "generation/batch.h"
#include "model/memory.h"
#include "model/model_config.h"
#include "model/model_source.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace cascade {

// What the planner needs to know about a model.
struct ModelProfile {
  std::string name;
  ModelConfig config;
  std::vector<uint64_t> layer_bytes;  // weight bytes of each layer
  // How each layer's bytes split under tensor parallelism (model/tensor_parallel.h): by
  // query heads (Q, O and their biases), by KV heads (K, V), by the dense FFN, by experts,
  // and whole (norms, a router, a shared expert: rank 0 holds it, counted on every rank).
  struct LayerSplit {
    uint64_t heads = 0, kv = 0, ffn = 0, experts = 0, whole = 0;
  };
  std::vector<LayerSplit> layer_split;
  uint64_t embedding_bytes = 0;       // token embedding (first stage)
  uint64_t head_bytes = 0;            // final norm + output (last stage; 0 extra when tied)
  uint64_t total_bytes() const;
};

ModelProfile ProfileFromSource(const ModelSource& source);
// A profile for a named shape at a weight type, without a file (cascade plan --shape).
ModelProfile ProfileFromShape(const ModelShape& shape, TensorType type);

struct WorkerSpec {
  std::string id;
  std::string address;
  std::string data_address;  // TCP data plane (tcp://host:port), or empty
  std::string node;
  uint64_t memory_bytes = 0;  // of each rank when tp > 1
  double gflops = 1.0;
  int tp = 1;  // ranks of its tensor-parallel group (one node): its stage is split over them
};

struct PlanLimits {
  // The KV cache every stage holds: room for kv_sequences full-context sequences, or
  // exactly kv_tokens positions when that is set (> 0).
  int kv_sequences = 8;
  int64_t kv_tokens = 0;
  int kv_block_size = kDefaultKvBlockSize;
  TensorType kv_type = TensorType::kF32;          // the KV cache's elements: F32 or F16
  int64_t batch_tokens = kDefaultMaxBatchTokens;  // tokens per micro-batch
  double reserve_fraction = 0.05;  // of each worker's memory kept free
  int min_stages = 1;  // pipeline over at least this many workers (throughput, tests)

  // KV positions per stage for a model of this context length.
  int64_t KvTokens(int64_t context_length) const;
};

struct StagePlan {
  int worker = 0;  // index into the workers given to MakePlan
  LayerRange layers;
  StageMemory memory;     // of each rank of a tensor-parallel worker (the largest share)
  uint64_t capacity = 0;  // the worker's usable memory (each rank's)
};

struct Plan {
  std::vector<StagePlan> stages;
  // What every stage is loaded with and the scheduler plans by.
  int64_t kv_blocks = 0;  // per stage
  int kv_block_size = kDefaultKvBlockSize;
  TensorType kv_type = TensorType::kF32;
  int64_t batch_tokens = kDefaultMaxBatchTokens;
  std::string Table(const ModelProfile& model, const std::vector<WorkerSpec>& workers) const;
};

absl::StatusOr<Plan> MakePlan(const ModelProfile& model, const std::vector<WorkerSpec>& workers,
                              const PlanLimits& limits);

// The memory of one rank of a stage over `layers` split over `tp` ranks: the largest
// rank's share of weights, KV cache (a replicated KV head counts on every rank that keeps
// it) and activations. tp = 1 is the whole stage.
absl::StatusOr<StageMemory> StageMemoryPerRank(const ModelProfile& model, LayerRange layers,
                                               const PlanLimits& limits, int tp);

// A plan after some of its workers were lost, over `workers` (the ones that remain and any
// spares). When every lost stage can move, unchanged, to a spare with the memory for it,
// the plan keeps its layer ranges and cache (so the surviving stages keep their weights
// loaded); otherwise a new plan is made over `workers`, with min_stages lowered to what
// they can give. `lost` are ids of old_workers. Pure.
absl::StatusOr<Plan> Replan(const ModelProfile& model, const Plan& old_plan,
                            const std::vector<WorkerSpec>& old_workers,
                            const std::vector<std::string>& lost,
                            const std::vector<WorkerSpec>& workers, const PlanLimits& limits);

// Parses "a=8GiB@100,b=4GiB" (name=memory[@gflops], memory in B/KiB/MiB/GiB/TiB or
// KB/MB/GB/TB) into worker specs.
absl::StatusOr<std::vector<WorkerSpec>> ParseWorkerSpecs(const std::string& spec);

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_PLANNER_H_
