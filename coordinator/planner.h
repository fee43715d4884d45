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
// - The KV cache: by default (no kv_sequences or kv_tokens) it fills what the weights and
//   activations leave of each worker's share (memory_fraction) on the tightest stage, like
//   vLLM's cache sized from the memory left: the fewest stages that hold
//   kAutoKvSequences full-context sequences (else the fewest that hold one), then as many
//   positions as the tightest stage has room for, at most max_sequences full-context
//   sequences (the scheduler runs no more at once), in F16 elements.
// - A plan that does not fit is refused with the shortfall named (which resource, how
//   much is needed, how much the workers offer) and the settings that would make it fit
//   (fewer KV sequences or positions, F16, a larger memory fraction or more workers).
// - Workers on one node (the same node_id, e.g. its boot id) that each report the node's
//   whole memory (node_memory) share it: the planner divides it among them, less what
//   workers there with a memory of their own were given.
// - A worker with tp > 1 is a tensor-parallel group on one node: its stage is split over
//   its ranks, and what must fit is each rank's share in each rank's memory
//   (StageMemoryPerRank); a group size the model cannot be split by is an error naming it.
// Pure and thread-safe.
#ifndef CASCADE_COORDINATOR_PLANNER_H_
#define CASCADE_COORDINATOR_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "generation/batch.h"
#include "model/memory.h"
#include "model/model_config.h"
#include "model/model_source.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "serving/scheduler_config.h"

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

// A weight type as `cascade plan --type` takes it: a tensor type (Q4_K, F16, ...) stored
// throughout, or one of llama.cpp's file types. A file type that is also a tensor type
// (Q8_0, Q6_K, Q2_K, F16, ...) is taken as that type throughout; a mix (Q4_K_M, Q3_K_S,
// ...) stores most matrices in its main type and some (attn_v, ffn_down, output) in a
// larger one, so its size is estimated from the mix's average bits per weight as llama.cpp
// reports it for Llama models (e.g. Q4_K_M: Q4_K with some Q6_K, 4.85 bits per weight).
struct WeightType {
  std::string name;         // as given, upper case
  TensorType type;          // the main type
  double bits_per_weight;   // of the matrices: the main type's, or the mix's average
};
std::optional<WeightType> ParseWeightType(std::string_view name);
std::vector<std::string> WeightTypeNames();  // every name ParseWeightType accepts

// A profile for a named shape at a weight type, without a file (cascade plan --shape).
ModelProfile ProfileFromShape(const ModelShape& shape, TensorType type);
ModelProfile ProfileFromShape(const ModelShape& shape, const WeightType& type);

struct WorkerSpec {
  std::string id;
  std::string address;
  std::string data_address;  // TCP data plane (tcp://host:port), or empty
  std::string node;     // its host name, as shown
  std::string node_id;  // identifies its machine (boot id): "" = unknown, shares nothing
  uint64_t memory_bytes = 0;  // of each rank when tp > 1
  // memory_bytes is the node's whole available memory (the worker was given none of its
  // own): workers with the same node_id share it.
  bool node_memory = false;
  double gflops = 1.0;
  int tp = 1;  // ranks of its tensor-parallel group (one node): its stage is split over them
  // Its registration when planned (WorkerRecord::generation; 0: unknown): a worker that
  // registers anew under the same id (a restart) no longer holds what the plan loaded.
  uint64_t generation = 0;
};

// The automatic KV cache (no kv_sequences or kv_tokens) prefers the fewest stages that hold
// this many full-context sequences, and settles for one where none do.
inline constexpr int kAutoKvSequences = 8;
// The fraction of each worker's memory a plan may use (vLLM's gpu_memory_utilization is
// the same idea, 0.9 there too); the rest is left to the process and the system.
inline constexpr double kDefaultMemoryFraction = 0.9;

struct PlanLimits {
  // The KV cache every stage holds: exactly kv_tokens positions when that is set (> 0),
  // else room for kv_sequences full-context sequences when that is set (> 0), else what
  // the memory left holds (see the policy above), at most max_sequences sequences.
  int kv_sequences = 0;
  int64_t kv_tokens = 0;
  int64_t context = 0;  // a full-context sequence's positions (0: the model's context)
  int max_sequences = SchedulerConfig().max_running;  // the coordinator sets its scheduler's
  int kv_block_size = kDefaultKvBlockSize;
  TensorType kv_type = TensorType::kF16;          // the KV cache's elements: F32 or F16
  int64_t batch_tokens = kDefaultMaxBatchTokens;  // tokens per micro-batch
  double memory_fraction = kDefaultMemoryFraction;  // of each worker's memory the plan uses
  int min_stages = 1;  // pipeline over at least this many workers (throughput, tests)
  // The automatic cache prefers the fewest stages that hold this many full-context
  // sequences (replicas ask for 1: more pipelines rather than deeper caches).
  int auto_kv_sequences = kAutoKvSequences;

  bool auto_kv() const { return kv_tokens <= 0 && kv_sequences <= 0; }
  // A full-context sequence's positions for a model of this context length.
  int64_t Context(int64_t model_context) const { return context > 0 ? context : model_context; }
  // KV positions per stage the limits ask for (the automatic cache's least: kAutoKvSequences
  // sequences).
  int64_t KvTokens(int64_t model_context) const;
};

// Each worker's memory as the planner counts it: workers that share a node's memory
// (node_memory, the same node_id) divide what the workers there with a memory of their own
// leave of it. Before memory_fraction.
std::vector<uint64_t> SharedMemory(const std::vector<WorkerSpec>& workers);

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
  TensorType kv_type = TensorType::kF16;
  int64_t batch_tokens = kDefaultMaxBatchTokens;
  int64_t kv_tokens() const { return kv_blocks * kv_block_size; }
  // The stages, a line on the model and the KV cache (positions per stage and the
  // full-context sequences of `context` positions they hold), and one on each node whose
  // memory workers share.
  std::string Table(const ModelProfile& model, const std::vector<WorkerSpec>& workers,
                    int64_t context = 0) const;
};

// "workers a, b share node n's 32 GiB: 16 GiB each" for each node whose memory workers
// share (SharedMemory), one a line; "" when none do.
std::string SharedNodesNote(const std::vector<WorkerSpec>& workers);

absl::StatusOr<Plan> MakePlan(const ModelProfile& model, const std::vector<WorkerSpec>& workers,
                              const PlanLimits& limits);

// Replicas: more than one pipeline over one pool of workers, so that more workers serve
// more requests. Each replica is planned as MakePlan plans a pipeline, over the workers the
// replicas before it left (MakePlan takes those with the most memory first, so the
// first replicas get the largest workers); the workers no replica uses are spares. With
// more than one replica asked for (or auto), the automatic KV cache takes the fewest
// stages that hold one full-context sequence (auto_kv_sequences 1), then fills them.
// `replicas` > 0 asks for exactly that many (FailedPrecondition naming how many fit and why
// the next did not); 0 (auto) makes as many as fit, at least one. Each Plan's
// StagePlan::worker indexes `workers`. Pure.
struct ReplicaPlans {
  std::vector<Plan> replicas;
  std::vector<int> spares;  // indexes into the workers given
  // Every replica's table (Plan::Table), headed "replica N", then the spares.
  std::string Table(const ModelProfile& model, const std::vector<WorkerSpec>& workers,
                    int64_t context = 0) const;
};
absl::StatusOr<ReplicaPlans> MakeReplicaPlans(const ModelProfile& model,
                                              const std::vector<WorkerSpec>& workers,
                                              const PlanLimits& limits, int replicas);

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
