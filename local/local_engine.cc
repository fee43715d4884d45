#include "local/local_engine.h"

namespace cascade {

absl::StatusOr<std::unique_ptr<LocalEngine>> LocalEngine::Create(
    const ModelSource& source, const Tokenizer& tokenizer, const LocalEngineOptions& options) {
  const ModelConfig& c = source.config();
  std::vector<LayerRange> stages = options.stages;
  if (stages.empty()) stages = {{0, static_cast<int>(c.n_layers)}};
  std::unique_ptr<LocalEngine> e(new LocalEngine());
  e->scheduler_ = std::make_unique<Scheduler>(options.scheduler, tokenizer, c.context_length,
                                              c.vocab_size);
  if (options.scheduler.speculative == Speculative::kDraft) {
    if (options.draft == nullptr) {
      return absl::InvalidArgumentError("speculative decoding with a draft model needs one");
    }
    auto drafter = options.draft->NewDrafter();
    if (!drafter.ok()) return drafter.status();
    e->scheduler_->SetDrafter(std::move(*drafter));
  }
  Scheduler* sched = e->scheduler_.get();
  auto pipeline = LocalPipeline::Create(
      source, stages, options.stage, /*plan_id=*/1,
      [sched](StepResult r) { sched->OnResult(std::move(r)); }, options.device);
  if (!pipeline.ok()) return pipeline.status();
  e->pipeline_ = std::move(*pipeline);
  Stage& first = e->pipeline_->executor(0).stage();
  PipelineSpec spec;
  spec.plan_id = 1;
  spec.num_stages = static_cast<int>(stages.size());
  spec.kv_blocks = first.kv_cache().num_blocks();
  spec.kv_block_size = first.options().kv_block_size;
  spec.max_batch_tokens = first.options().max_batch_tokens;
  spec.first_stage = e->pipeline_->first();
  e->scheduler_->Start();
  e->scheduler_->Attach(std::move(spec));
  return e;
}

LocalEngine::~LocalEngine() {
  if (scheduler_) scheduler_->Stop();
  if (pipeline_) pipeline_->Stop();
}

}  // namespace cascade
