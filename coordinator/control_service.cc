#include "coordinator/control_service.h"

#include "transport/grpc_util.h"

namespace cascade {

grpc::Status ControlService::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                      v1::RegisterResponse* resp) {
  auto r = controller_->Register(*req, std::string(PresentedMetadata(*ctx, kJoinTokenMetadata)));
  if (!r.ok()) return ToGrpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status ControlService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                       v1::HeartbeatResponse* resp) {
  auto known = controller_->Heartbeat(*req);
  if (!known.ok()) return ToGrpc(known.status());
  resp->set_known(*known);
  return grpc::Status::OK;
}

grpc::Status ControlService::ClusterStatus(grpc::ServerContext* ctx,
                                           const v1::ClusterStatusRequest*,
                                           v1::ClusterStatusResponse* resp) {
  if (!controller_->MayQuery(std::string(PresentedMetadata(*ctx, kJoinTokenMetadata)))) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the cluster's status needs its join token");
  }
  FillClusterStatus(controller_->Snapshot(), model_id_, resp);
  if (annotate_) annotate_(resp);
  return grpc::Status::OK;
}

namespace {

void FillStages(const ClusterSnapshot& s, int replica,
                google::protobuf::RepeatedPtrField<v1::StageStatus>* out) {
  const bool plan_live = s.state == ClusterState::kServing || s.state == ClusterState::kDraining;
  for (size_t i = 0; i < s.plan.stages.size(); ++i) {
    const StagePlan& st = s.plan.stages[i];
    const WorkerSpec& spec = s.plan_workers[st.worker];
    v1::StageStatus* ss = out->Add();
    ss->set_index(static_cast<int32_t>(i));
    ss->set_replica(replica);
    ss->set_first_layer(st.layers.first);
    ss->set_last_layer(st.layers.last);
    ss->set_planned_bytes(st.memory.total());
    ss->set_worker_id(spec.id);
    ss->set_address(spec.address);
    ss->set_data_address(s.stage_addresses[i]);
    for (size_t j = 0; j < s.workers.size(); ++j) {
      if (s.workers[j].id != spec.id) continue;
      ss->set_state(s.workers[j].state);
      *ss->mutable_stats() = s.workers[j].stats;
      ss->set_alive(s.alive[j]);
      const bool heartbeat_lags = s.workers[j].state != v1::WORKER_STATE_SERVING &&
                                  s.workers[j].state != v1::WORKER_STATE_DRAINING &&
                                  s.workers[j].state != v1::WORKER_STATE_FAILED;
      if (plan_live && s.alive[j] && heartbeat_lags) ss->set_state(v1::WORKER_STATE_SERVING);
      if (plan_live && ss->stats().kv_blocks_total() == 0) {
        ss->mutable_stats()->set_kv_blocks_total(s.plan.kv_blocks);
      }
    }
  }
}

void FillScheduler(const ClusterSnapshot& s, v1::SchedulerStatus* o) {
  const SchedulerStats& st = s.scheduler;
  o->set_waiting(st.waiting);
  o->set_running(st.running);
  o->set_in_flight_batches(st.in_flight_batches);
  o->set_kv_blocks_reserved(st.kv_blocks_reserved);
  o->set_kv_blocks_total(st.kv_blocks_total);
  auto count = [&](RequestOutcome o) { return s.requests[static_cast<int>(o)]; };
  o->set_completed(count(RequestOutcome::kCompleted));
  o->set_failed(count(RequestOutcome::kFailed));
  o->set_cancelled(count(RequestOutcome::kCancelled));
  o->set_rejected(count(RequestOutcome::kRejected));
  o->set_generated_tokens(st.generated_tokens);
  o->set_prompt_tokens(st.prompt_tokens);
  o->set_prefix_queried_tokens(st.prefix_queried_tokens);
  o->set_prefix_hit_tokens(st.prefix_hit_tokens);
  o->set_prefix_blocks_cached(st.prefix_blocks_cached);
  o->set_prefix_blocks_in_use(st.prefix_blocks_in_use);
  o->set_handed_over(st.handed_over);
  o->set_resumed(st.resumed);
  o->set_spec_draft_tokens(st.spec_draft_tokens);
  o->set_spec_accepted_tokens(st.spec_accepted_tokens);
  o->set_uptime_s(s.uptime_s);
}

// Adds one replica's counts to the cluster's.
void AddScheduler(const v1::SchedulerStatus& r, v1::SchedulerStatus* o) {
  o->set_waiting(o->waiting() + r.waiting());
  o->set_running(o->running() + r.running());
  o->set_in_flight_batches(o->in_flight_batches() + r.in_flight_batches());
  o->set_kv_blocks_reserved(o->kv_blocks_reserved() + r.kv_blocks_reserved());
  o->set_kv_blocks_total(o->kv_blocks_total() + r.kv_blocks_total());
  o->set_completed(o->completed() + r.completed());
  o->set_failed(o->failed() + r.failed());
  o->set_cancelled(o->cancelled() + r.cancelled());
  o->set_rejected(o->rejected() + r.rejected());
  o->set_generated_tokens(o->generated_tokens() + r.generated_tokens());
  o->set_prompt_tokens(o->prompt_tokens() + r.prompt_tokens());
  o->set_prefix_queried_tokens(o->prefix_queried_tokens() + r.prefix_queried_tokens());
  o->set_prefix_hit_tokens(o->prefix_hit_tokens() + r.prefix_hit_tokens());
  o->set_prefix_blocks_cached(o->prefix_blocks_cached() + r.prefix_blocks_cached());
  o->set_prefix_blocks_in_use(o->prefix_blocks_in_use() + r.prefix_blocks_in_use());
  o->set_handed_over(o->handed_over() + r.handed_over());
  o->set_resumed(o->resumed() + r.resumed());
  o->set_spec_draft_tokens(o->spec_draft_tokens() + r.spec_draft_tokens());
  o->set_spec_accepted_tokens(o->spec_accepted_tokens() + r.spec_accepted_tokens());
}

}  // namespace

void FillClusterStatus(const ReplicaSetSnapshot& s, const std::string& model_id,
                       v1::ClusterStatusResponse* out) {
  const auto now = std::chrono::steady_clock::now();
  if (!model_id.empty()) out->set_model(model_id);
  out->set_serving(s.state == ClusterState::kServing);
  out->set_state(ClusterStateName(s.state));
  if (!s.replicas.empty()) out->set_plan_id(s.replicas.front().plan_id);
  if (!s.reason.empty() && s.state != ClusterState::kServing) out->set_error(s.reason);
  for (size_t i = 0; i < s.workers.size(); ++i) {
    const WorkerRecord& w = s.workers[i];
    v1::WorkerInfo* wi = out->add_workers();
    wi->set_worker_id(w.id);
    wi->set_node(w.node);
    wi->set_address(w.address);
    *wi->mutable_resources() = w.resources;
    wi->set_state(w.state);
    wi->set_seconds_since_heartbeat(std::chrono::duration<double>(now - w.last_seen).count());
    wi->set_alive(s.alive[i]);
    for (const v1::GpuStats& g : w.gpus) *wi->add_gpus() = g;
    if (w.process.ByteSizeLong() > 0) *wi->mutable_process() = w.process;
  }
  v1::SchedulerStatus* sum = out->mutable_scheduler();
  for (size_t r = 0; r < s.replicas.size(); ++r) {
    const ClusterSnapshot& c = s.replicas[r];
    v1::ReplicaStatus* rs = out->add_replicas();
    rs->set_index(static_cast<int32_t>(r));
    rs->set_state(ClusterStateName(c.state));
    if (c.state != ClusterState::kServing && !c.reason.empty()) rs->set_error(c.reason);
    rs->set_plan_id(c.plan_id);
    for (const WorkerRecord& w : c.workers) rs->add_workers(w.id);
    FillStages(c, static_cast<int>(r), rs->mutable_stages());
    FillStages(c, static_cast<int>(r), out->mutable_stages());
    FillScheduler(c, rs->mutable_scheduler());
    AddScheduler(rs->scheduler(), sum);
  }
  sum->set_uptime_s(s.uptime_s);
}

}  // namespace cascade
