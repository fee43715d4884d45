#include "coordinator/pipeline_loader.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "util/secret.h"

namespace cascade {

std::string StageDataAddress(DataPlane data_plane, const WorkerSpec& worker) {
  return data_plane != DataPlane::kGrpc && !worker.data_address.empty() ? worker.data_address
                                                                        : worker.address;
}

PipelineLoader::PipelineLoader(PipelineLoaderOptions options, WorkerClient* workers,
                               SenderFactory make_sender)
    : options_(std::move(options)), workers_(workers), make_sender_(std::move(make_sender)) {}

std::vector<v1::LoadStageRequest> PipelineLoader::MakeRequests(
    const PipelineTarget& target, const std::vector<std::string>& link_keys) const {
  const Plan& plan = target.plan;
  const int S = static_cast<int>(plan.stages.size());
  std::vector<v1::LoadStageRequest> out(S);
  for (int i = 0; i < S; ++i) {
    const StagePlan& sp = plan.stages[i];
    v1::LoadStageRequest& req = out[i];
    req.set_plan_id(target.plan_id);
    req.set_model_path(options_.model_path);
    req.set_stage_index(i);
    req.set_num_stages(S);
    req.set_first_layer(sp.layers.first);
    req.set_last_layer(sp.layers.last);
    req.set_kv_blocks(plan.kv_blocks);
    req.set_kv_block_size(plan.kv_block_size);
    req.set_kv_type(plan.kv_type == TensorType::kF16 ? v1::KV_CACHE_TYPE_F16
                                                     : v1::KV_CACHE_TYPE_F32);
    req.set_max_batch_tokens(static_cast<int32_t>(plan.batch_tokens));
    if (i + 1 < S) {
      req.set_next_address(
          StageDataAddress(options_.data_plane, target.workers[plan.stages[i + 1].worker]));
    }
    req.set_coordinator_address(options_.results_address);
    req.set_threads(options_.stage.threads);
    if (options_.stage.device) req.set_device(DeviceName(*options_.stage.device));
    req.set_exact(!options_.stage.quantized_activations);
    req.set_inbound_key(link_keys[i]);
    req.set_outbound_key(link_keys[i + 1]);
  }
  return out;
}

absl::Status PipelineLoader::LoadAll(const std::vector<v1::LoadStageRequest>& requests,
                                     const std::vector<WorkerRecord>& stage_workers,
                                     std::vector<std::string>* failed_workers) const {
  // Every stage loads at once; each worker pages in only its own layers.
  std::vector<std::future<absl::Status>> loads;
  for (size_t i = 0; i < requests.size(); ++i) {
    loads.push_back(
        std::async(std::launch::async, [this, &req = requests[i], &w = stage_workers[i], i]() {
          absl::Status st = workers_->LoadStage(w, req);
          if (st.ok()) return st;
          return absl::Status(st.code(),
                              absl::StrCat("loading stage ", i, " on ", w.id, ": ", st.message()));
        }));
  }
  absl::Status failed;
  for (size_t i = 0; i < loads.size(); ++i) {
    absl::Status st = loads[i].get();
    if (st.ok()) continue;
    failed_workers->push_back(stage_workers[i].id);
    if (failed.ok()) failed = st;
  }
  return failed;
}

absl::StatusOr<LoadedPipeline> PipelineLoader::Load(
    const PipelineTarget& target, const std::vector<WorkerRecord>& stage_workers,
    std::vector<std::string>* failed_workers) const {
  const Plan& plan = target.plan;
  const size_t S = plan.stages.size();
  if (S == 0 || stage_workers.size() != S) {
    return absl::InvalidArgumentError(
        absl::StrCat("a plan of ", S, " stage(s) given ", stage_workers.size(), " worker(s)"));
  }
  LoadedPipeline out;
  // A fresh key for each link of the plan.
  out.link_keys.resize(S + 1);
  for (std::string& k : out.link_keys) k = RandomSecret();
  for (const StagePlan& sp : plan.stages) {
    const WorkerSpec& w = target.workers[sp.worker];
    out.stages.push_back({w.id, StageDataAddress(options_.data_plane, w)});
  }
  if (absl::Status st = LoadAll(MakeRequests(target, out.link_keys), stage_workers, failed_workers);
      !st.ok()) {
    return st;
  }
  SenderOptions link;
  link.link_key = out.link_keys[0];
  auto sender = make_sender_(out.stages[0].data_address, link);
  if (!sender.ok()) return sender.status();
  out.spec.plan_id = target.plan_id;
  out.spec.num_stages = static_cast<int>(S);
  out.spec.kv_blocks = plan.kv_blocks;
  out.spec.kv_block_size = plan.kv_block_size;
  out.spec.max_batch_tokens = plan.batch_tokens;
  out.spec.first_stage = std::shared_ptr<ActivationSender>(std::move(*sender));
  return out;
}

}  // namespace cascade
