// LocalPipeline: S pipeline stages as threads of one process, linked by in-process
// activation links. Used by `cascade generate` (one stage), benchmarks and tests; it runs
// exactly the StageExecutor code that workers run.
//
// Contract: Create builds and starts every stage; results of the last stage go to
// `on_result` (called on the last stage's thread). Stop (or the destructor) closes the
// links and joins the threads.
#ifndef CASCADE_WORKER_LOCAL_PIPELINE_H_
#define CASCADE_WORKER_LOCAL_PIPELINE_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_source.h"
#include "tensor/device.h"
#include "worker/stage_executor.h"

namespace cascade {

class LocalPipeline {
 public:
  // Each stage computes on its own backend for `device` (kernels/make_backend.h).
  static absl::StatusOr<std::unique_ptr<LocalPipeline>> Create(
      const ModelSource& source, const std::vector<LayerRange>& ranges, const StageOptions& options,
      uint64_t plan_id, std::function<void(StepResult)> on_result,
      DeviceSpec device = {DeviceKind::kCpu, 0});
  ~LocalPipeline();

  std::shared_ptr<ActivationSender> first() { return first_; }
  int num_stages() const { return static_cast<int>(executors_.size()); }
  StageExecutor& executor(int i) { return *executors_[i]; }
  void Stop();

 private:
  LocalPipeline() = default;
  std::shared_ptr<ActivationSender> first_;
  std::vector<std::unique_ptr<StageExecutor>> executors_;
};

// Splits n_layers into `stages` contiguous ranges of nearly equal size.
std::vector<LayerRange> EvenLayerRanges(int n_layers, int stages);

}  // namespace cascade

#endif  // CASCADE_WORKER_LOCAL_PIPELINE_H_
