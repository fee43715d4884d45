#include "worker/local_pipeline.h"

#include "absl/strings/str_cat.h"
#include "kernels/make_backend.h"
#include "transport/inproc.h"
#include "util/status_macros.h"

namespace cascade {

std::vector<LayerRange> EvenLayerRanges(int n_layers, int stages) {
  std::vector<LayerRange> r;
  for (int i = 0; i < stages; ++i) {
    r.push_back({n_layers * i / stages, n_layers * (i + 1) / stages});
  }
  return r;
}

absl::StatusOr<std::unique_ptr<LocalPipeline>> LocalPipeline::Create(
    const ModelSource& source, const std::vector<LayerRange>& ranges, const StageOptions& options,
    uint64_t plan_id, std::function<void(StepResult)> on_result, DeviceSpec device) {
  if (ranges.empty()) return absl::InvalidArgumentError("a pipeline needs at least one stage");
  std::unique_ptr<LocalPipeline> p(new LocalPipeline());
  auto results = std::make_shared<CallbackResultSender>([on_result](StepResult r) {
    on_result(std::move(r));
    return absl::OkStatus();
  });
  // Links: coordinator -> 0 -> 1 -> ... -> S-1.
  std::vector<InProcessLink> links(ranges.size());
  for (auto& l : links) l = MakeInProcessLink();
  p->first_ = std::shared_ptr<ActivationSender>(std::move(links[0].sender));
  for (size_t i = 0; i < ranges.size(); ++i) {
    StageOptions so = options;
    so.layers = ranges[i];
    CASCADE_ASSIGN_OR_RETURN(
        std::unique_ptr<Backend> backend,
        MakeBackend(device, {.threads = so.threads,
                             .quantized_activations = so.quantized_activations}));
    CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Stage> stage,
                             Stage::Create(source, so, std::move(backend)));
    std::unique_ptr<ActivationSender> out;
    if (i + 1 < ranges.size()) out = std::move(links[i + 1].sender);
    p->executors_.push_back(
        std::make_unique<StageExecutor>(std::move(stage), static_cast<uint32_t>(i), plan_id,
                                        std::move(links[i].receiver), std::move(out), results));
  }
  for (auto& e : p->executors_) e->Start();
  return p;
}

LocalPipeline::~LocalPipeline() { Stop(); }

void LocalPipeline::Stop() {
  if (first_) first_->Close();
  for (auto& e : executors_) e->Stop();  // in order: each closes the link to the next
}

}  // namespace cascade
