// LocalEngine: the scheduler over a pipeline of stages that are threads of this process,
// the whole serving path without a network. `cascade generate` runs on it (one stage
// holding every layer), benchmarks take it as "one process", and tests as the reference
// a cluster must match.
//
// Contract: Create loads every stage and starts the scheduler with the pipeline attached;
// the destructor stops both. The ModelSource and Tokenizer must outlive the engine.
// Thread-safe as the Scheduler is.
#ifndef CASCADE_LOCAL_LOCAL_ENGINE_H_
#define CASCADE_LOCAL_LOCAL_ENGINE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/draft_model.h"
#include "serving/scheduler.h"
#include "worker/local_pipeline.h"

namespace cascade {

struct LocalEngineOptions {
  std::vector<LayerRange> stages;  // empty: one stage holding every layer
  StageOptions stage;              // threads, KV size, batch size of each stage
  DeviceSpec device{DeviceKind::kCpu, 0};
  SchedulerConfig scheduler;
  // With scheduler.speculative == kDraft: the draft model (it must outlive the engine).
  const DraftModel* draft = nullptr;
};

class LocalEngine {
 public:
  static absl::StatusOr<std::unique_ptr<LocalEngine>> Create(const ModelSource& source,
                                                             const Tokenizer& tokenizer,
                                                             const LocalEngineOptions& options);
  ~LocalEngine();

  Scheduler& scheduler() { return *scheduler_; }
  LocalPipeline& pipeline() { return *pipeline_; }

 private:
  LocalEngine() = default;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<LocalPipeline> pipeline_;
};

}  // namespace cascade

#endif  // CASCADE_LOCAL_LOCAL_ENGINE_H_
