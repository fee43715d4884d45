#include "worker/stage_host.h"

#include <malloc.h>

#include <limits.h>
#include <stdlib.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "kernels/make_backend.h"
#include "transport/address.h"
#include "transport/factory.h"
#include "util/logging.h"
#include "util/status_macros.h"
#include "worker/tp_group.h"

namespace cascade {

StageHost::StageHost(StageHostOptions options, FrameRouter* router)
    : options_(options), router_(router) {}

StageHost::~StageHost() {
  absl::MutexLock lock(&load_mu_);
  StopStage(/*graceful=*/true);
  UnloadGroup();
}

void StageHost::UnloadGroup() {
  if (options_.tp == nullptr) return;
  if (absl::Status st = options_.tp->Unload(); !st.ok()) {
    spdlog::warn("unloading the tensor-parallel group: {}", st.message());
  }
}

bool SameStageRequest(const v1::LoadStageRequest& a, const v1::LoadStageRequest& b) {
  return a.model_path() == b.model_path() && a.stage_index() == b.stage_index() &&
         a.num_stages() == b.num_stages() && a.first_layer() == b.first_layer() &&
         a.last_layer() == b.last_layer() && a.kv_blocks() == b.kv_blocks() &&
         a.kv_block_size() == b.kv_block_size() && a.max_batch_tokens() == b.max_batch_tokens() &&
         a.threads() == b.threads() && a.device() == b.device() && a.exact() == b.exact() &&
         a.kv_type() == b.kv_type();
}

StageOptions StageOptionsFor(const v1::LoadStageRequest& req, const StageHostOptions& host) {
  StageOptions so;
  so.layers = {req.first_layer(), req.last_layer()};
  so.threads = req.threads() > 0 ? req.threads() : host.threads;
  so.kv_blocks = req.kv_blocks();
  so.kv_block_size = req.kv_block_size();
  so.max_batch_tokens = req.max_batch_tokens();
  so.quantized_activations = !req.exact();
  so.kv_type = req.kv_type() == v1::KV_CACHE_TYPE_F16 ? TensorType::kF16 : TensorType::kF32;
  // The plan counted this cache's memory: take it now (engine/kv_cache.h).
  so.kv_resident = true;
  return so;
}

DeviceSpec DeviceFor(const v1::LoadStageRequest& req, const StageHostOptions& host) {
  if (req.device().empty()) return host.device;
  auto d = ParseDevice(req.device());  // validated before any load
  return d.ok() ? *d : host.device;
}

FrameExpectations ExpectationsFor(const v1::LoadStageRequest& req, const ModelConfig& c) {
  FrameExpectations e;
  e.plan_id = req.plan_id();
  e.stage = static_cast<uint32_t>(req.stage_index());
  e.first_stage = req.stage_index() == 0;
  e.dim = c.dim;
  e.vocab_size = c.vocab_size;
  e.max_batch_tokens = req.max_batch_tokens();
  e.context_length = c.context_length;
  e.link_key = req.inbound_key();
  return e;
}

absl::Status StageHost::Validate(const v1::LoadStageRequest& req) const {
  if (req.num_stages() <= 0 || req.num_stages() > 1024 || req.stage_index() < 0 ||
      req.stage_index() >= req.num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", req.stage_index(), " of ",
                                                   req.num_stages(), " is not a valid stage"));
  }
  const bool last = req.stage_index() + 1 == req.num_stages();
  if (!last && req.next_address().empty()) {
    return absl::InvalidArgumentError("a stage other than the last needs next_address");
  }
  if (last && req.coordinator_address().empty()) {
    return absl::InvalidArgumentError("the last stage needs coordinator_address");
  }
  for (const std::string& a : {last ? req.coordinator_address() : req.next_address()}) {
    if (auto parsed = ParseAddress(a); !parsed.ok()) return parsed.status();
  }
  if (req.kv_blocks() <= 0 || req.kv_blocks() > (int64_t{1} << 30) || req.kv_block_size() <= 0 ||
      req.kv_block_size() > 4096 || req.max_batch_tokens() <= 0 ||
      req.max_batch_tokens() > (1 << 20) || req.threads() < 0 || req.threads() > 4096) {
    return absl::InvalidArgumentError(
        "kv_blocks, kv_block_size, max_batch_tokens or threads is out of range");
  }
  if (req.kv_type() != v1::KV_CACHE_TYPE_F32 && req.kv_type() != v1::KV_CACHE_TYPE_F16) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_type ", static_cast<int>(req.kv_type()), " is not F32 or F16"));
  }
  if (!req.device().empty()) {
    if (auto d = ParseDevice(req.device()); !d.ok()) return d.status();
  }
  if (!options_.model_dir.empty()) {
    // The real paths, so that neither ".." nor a symbolic link leads out of the folder.
    char dir[PATH_MAX], file[PATH_MAX];
    if (::realpath(options_.model_dir.c_str(), dir) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("--model-dir ", options_.model_dir, " cannot be resolved"));
    }
    const std::string prefix = std::string(dir) + "/";
    if (::realpath(req.model_path().c_str(), file) == nullptr ||
        std::string(file).rfind(prefix, 0) != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "model_path '", req.model_path(), "' is not under this worker's model folder ",
          options_.model_dir));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::LoadStageResponse> StageHost::Load(const v1::LoadStageRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::MutexLock load(&load_mu_);
  if (absl::Status st = Validate(req); !st.ok()) return st;
  // The old plan's neighbours may be gone: its links are dropped, not drained.
  const bool reuse = loaded_ && SameStageRequest(*loaded_, req);
  std::unique_ptr<Stage> kept = StopStage(/*graceful=*/false, /*keep=*/reuse);
  {
    absl::MutexLock lock(&mu_);
    state_ = v1::WORKER_STATE_LOADING;
    error_.clear();
  }
  auto fail = [this](absl::Status st) {
    spdlog::error("LoadStage failed: {}", st.message());
    absl::MutexLock lock(&mu_);
    state_ = v1::WORKER_STATE_FAILED;
    error_ = std::string(st.message());
    return st;
  };
  // This process's stage (and, in a tensor-parallel group, every rank's slice of it).
  if (options_.tp != nullptr) {
    if (absl::Status st = options_.tp->BeginLoad(req); !st.ok()) return fail(st);
  }
  const bool last = req.stage_index() + 1 == req.num_stages();
  StageOptions so = StageOptionsFor(req, options_);
  if (options_.tp != nullptr) so.tp = options_.tp->compute();
  std::unique_ptr<ActivationSender> out;
  std::shared_ptr<ResultSender> results;
  absl::StatusOr<std::unique_ptr<Stage>> stage =
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_) -> absl::StatusOr<std::unique_ptr<Stage>> {
    if (!source_ || source_path_ != req.model_path()) {
      source_.reset();
      source_path_.clear();
      CASCADE_ASSIGN_OR_RETURN(source_, ModelSource::Open(req.model_path()));
      source_path_ = req.model_path();
    }
    std::unique_ptr<Stage> s;
    if (kept) {
      kept->kv_cache().Clear();  // the new plan starts every sequence afresh
      s = std::move(kept);
    } else {
      CASCADE_ASSIGN_OR_RETURN(
          std::unique_ptr<Backend> backend,
          MakeBackend(DeviceFor(req, options_),
                      {.threads = so.threads, .quantized_activations = so.quantized_activations}));
      CASCADE_ASSIGN_OR_RETURN(s, Stage::Create(*source_, so, std::move(backend)));
    }
    SenderOptions link;
    link.link_key = req.outbound_key();
    if (last) {
      CASCADE_ASSIGN_OR_RETURN(results, MakeResultSender(req.coordinator_address(), link));
    } else {
      CASCADE_ASSIGN_OR_RETURN(out, MakeActivationSender(req.next_address(), link));
    }
    return s;
  }();
  if (options_.tp != nullptr) {
    absl::Status all = options_.tp->FinishLoad(stage.ok() ? absl::OkStatus() : stage.status());
    if (!all.ok()) return fail(stage.ok() ? all : stage.status());
  }
  if (!stage.ok()) return fail(stage.status());
  v1::LoadStageResponse resp;
  resp.set_backend((*stage)->backend().name());
  resp.set_kv_bytes(KvCache::BytesFor((*stage)->kv_cache().options()));
  resp.set_weight_bytes((*stage)->weights().matrix_bytes());
  const FrameExpectations e = ExpectationsFor(req, source_->config());
  inbox_ = std::make_shared<FrameInbox>(e);
  auto executor = std::make_unique<StageExecutor>(
      std::move(*stage), static_cast<uint32_t>(req.stage_index()), req.plan_id(),
      inbox_->MakeReceiver(), std::move(out), std::move(results));
  executor->SetMirror(options_.tp);
  executor->Start();
  router_->SetInbox(inbox_);
  loaded_ = req;
  resp.set_load_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  absl::MutexLock lock(&mu_);
  executor_ = std::move(executor);
  state_ = v1::WORKER_STATE_SERVING;
  plan_id_ = req.plan_id();
  stage_index_ = req.stage_index();
  range_ = so.layers;
  spdlog::info("stage {} of {} {}: layers [{}, {}) of {} in {:.2f}s on {} (plan {})",
               req.stage_index(), req.num_stages(), reuse ? "kept for a new plan" : "loaded",
               req.first_layer(), req.last_layer(), req.model_path(), resp.load_seconds(),
               resp.backend(), req.plan_id());
  return resp;
}

std::unique_ptr<Stage> StageHost::StopStage(bool graceful, bool keep) {
  router_->SetInbox(nullptr);  // new frames are refused from here on
  if (inbox_) inbox_->Close();  // the executor drains what is queued, then stops
  std::unique_ptr<StageExecutor> executor;
  {
    absl::MutexLock lock(&mu_);
    executor = std::move(executor_);
  }
  std::unique_ptr<Stage> stage;
  if (executor) {
    executor->Stop(graceful);
    if (keep) stage = executor->ReleaseStage();
    executor.reset();  // its receiver reads the inbox: gone before the inbox is
  }
  inbox_.reset();
  loaded_.reset();
  // What the stage and its buffers freed goes back to the system (glibc keeps freed heap
  // memory otherwise): a worker that loads and unloads stages for days must not grow.
  if (!keep) malloc_trim(0);
  absl::MutexLock lock(&mu_);
  plan_id_ = 0;
  stage_index_ = -1;
  range_ = {};
  return stage;
}

absl::Status StageHost::Unload(uint64_t plan_id) {
  absl::MutexLock load(&load_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (plan_id != 0 && plan_id_ != 0 && plan_id != plan_id_) {
      return absl::NotFoundError(
          absl::StrCat("plan ", plan_id, " is not loaded here (plan ", plan_id_, " is)"));
    }
  }
  StopStage(/*graceful=*/true);
  UnloadGroup();
  absl::MutexLock lock(&mu_);
  state_ = v1::WORKER_STATE_IDLE;
  error_.clear();
  return absl::OkStatus();
}

void StageHost::Drain() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == v1::WORKER_STATE_SERVING) state_ = v1::WORKER_STATE_DRAINING;
  }
  absl::MutexLock load(&load_mu_);
  StopStage(/*graceful=*/true);
  UnloadGroup();
  absl::MutexLock lock(&mu_);
  state_ = v1::WORKER_STATE_IDLE;
  spdlog::info("drained: the stage finished its queued frames and is unloaded");
}

void StageHost::FillStats(v1::StageStats* out) const {
  if (!executor_) return;
  const ExecutorStats s = executor_->Stats();
  out->set_frames(s.frames);
  out->set_tokens(s.tokens);
  out->set_busy_s(s.busy_seconds);
  out->set_cpu_s(s.cpu_seconds);
  out->set_kv_blocks_used(s.kv_blocks_used);
  out->set_kv_blocks_total(s.kv_blocks_total);
  out->set_rejected_frames(router_->rejected());
  out->set_activation_bytes_in(s.activation_bytes_in);
  out->set_activation_bytes_out(s.activation_bytes_out);
  v1::Histogram* h = out->mutable_hop_in_seconds();
  for (double b : s.hop_in_seconds.bounds()) h->add_bounds(b);
  for (uint64_t c : s.hop_in_seconds.counts()) h->add_counts(c);
  h->set_sum(s.hop_in_seconds.sum());
}

void StageHost::FillStatus(v1::WorkerStatus* out) const {
  absl::MutexLock lock(&mu_);
  out->set_state(state_);
  out->set_plan_id(plan_id_);
  out->set_stage_index(stage_index_);
  out->set_first_layer(range_.first);
  out->set_last_layer(range_.last);
  out->set_error(error_);
  FillStats(out->mutable_stats());
}

void StageHost::FillHeartbeat(v1::HeartbeatRequest* out) const {
  absl::MutexLock lock(&mu_);
  out->set_state(state_);
  out->set_error(error_);
  FillStats(out->mutable_stats());
}

v1::WorkerState StageHost::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

}  // namespace cascade
