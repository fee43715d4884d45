#include "worker/worker_server.h"

#include <unistd.h>

#include <chrono>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/gpu.h"
#include "util/logging.h"
#include "worker/grpc_util.h"

namespace cascade {

uint64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

// The Worker control-plane service.
class WorkerServer::WorkerServiceImpl final : public v1::Worker::Service {
 public:
  WorkerServiceImpl(const WorkerOptions& options, StagePipeService* pipe)
      : options_(options), pipe_(pipe) {}
  ~WorkerServiceImpl() override { UnloadLocked(); }

  grpc::Status LoadStage(grpc::ServerContext*, const v1::LoadStageRequest* req,
                         v1::LoadStageResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto t0 = std::chrono::steady_clock::now();
    state_ = v1::WORKER_STATE_LOADING;
    absl::Status st = Load(*req, resp);
    if (!st.ok()) {
      state_ = v1::WORKER_STATE_FAILED;
      error_ = std::string(st.message());
      spdlog::error("LoadStage failed: {}", st.message());
      return ToGrpc(st);
    }
    resp->set_load_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    state_ = v1::WORKER_STATE_SERVING;
    error_.clear();
    spdlog::info("stage {} of {} loaded: layers [{}, {}) of {} in {:.2f}s on {}",
                 req->stage_index(), req->num_stages(), req->first_layer(), req->last_layer(),
                 req->model_path(), resp->load_seconds(), resp->backend());
    return grpc::Status::OK;
  }

  grpc::Status Unload(grpc::ServerContext*, const v1::UnloadRequest*,
                      v1::UnloadResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    UnloadLocked();
    state_ = v1::WORKER_STATE_IDLE;
    return grpc::Status::OK;
  }

  grpc::Status Drain(grpc::ServerContext*, const v1::DrainRequest*, v1::DrainResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = v1::WORKER_STATE_DRAINING;
    return grpc::Status::OK;
  }

  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest*,
                      v1::WorkerStatus* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    Fill(out);
    return grpc::Status::OK;
  }

  void Fill(v1::WorkerStatus* out) {
    out->set_worker_id(options_.worker_id);
    out->set_state(state_);
    out->set_plan_id(plan_id_);
    out->set_stage_index(stage_index_);
    out->set_first_layer(range_.first);
    out->set_last_layer(range_.last);
    out->set_error(error_);
    if (executor_) FillStats(executor_->Stats(), out->mutable_stats());
  }

  void HeartbeatInfo(v1::HeartbeatRequest* hb) {
    std::lock_guard<std::mutex> lock(mu_);
    hb->set_state(state_);
    hb->set_error(error_);
    if (executor_) FillStats(executor_->Stats(), hb->mutable_stats());
  }

 private:
  static void FillStats(const ExecutorStats& s, v1::StageStats* out) {
    out->set_frames(s.frames);
    out->set_tokens(s.tokens);
    out->set_busy_s(s.busy_seconds);
    out->set_cpu_s(s.cpu_seconds);
    out->set_kv_blocks_used(s.kv_blocks_used);
    out->set_kv_blocks_total(s.kv_blocks_total);
  }

  absl::Status Load(const v1::LoadStageRequest& req, v1::LoadStageResponse* resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (req.stage_index() < 0 || req.stage_index() >= req.num_stages() || req.num_stages() <= 0 ||
        req.num_stages() > 1024) {
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
    for (const std::string& a : {req.next_address(), req.coordinator_address()}) {
      if (IsTcpAddress(a)) {
        if (auto hp = ParseHostPort(a); !hp.ok()) return hp.status();
      }
    }
    if (req.kv_blocks() <= 0 || req.kv_blocks() > (int64_t{1} << 30) || req.kv_block_size() <= 0 ||
        req.kv_block_size() > 4096 || req.max_batch_tokens() <= 0 ||
        req.max_batch_tokens() > (1 << 20)) {
      return absl::InvalidArgumentError(
          "kv_blocks, kv_block_size or max_batch_tokens is out of range");
    }
    UnloadLocked();
    if (!source_ || source_path_ != req.model_path()) {
      source_.reset();
      auto src = ModelSource::Open(req.model_path());
      if (!src.ok()) return src.status();
      source_ = std::move(*src);
      source_path_ = req.model_path();
    }
    const ModelConfig& c = source_->config();
    StageOptions so;
    so.layers = {req.first_layer(), req.last_layer()};
    so.threads = req.threads() > 0 ? req.threads() : options_.threads;
    so.kv_blocks = req.kv_blocks();
    so.kv_block_size = req.kv_block_size();
    so.max_batch_tokens = req.max_batch_tokens();
    std::unique_ptr<Backend> backend;
    const std::string device = req.device().empty() ? options_.device : req.device();
    if (device == "cpu" || (device == "auto" && ListGpus(nullptr).empty())) {
      CpuBackendOptions bo;
      bo.threads = so.threads;
      backend = std::make_unique<CpuBackend>(bo);
    } else {
      CudaBackendOptions co;
      if (device.rfind("cuda:", 0) == 0) co.device = std::atoi(device.c_str() + 5);
      auto be = CreateCudaBackend(co);
      if (!be.ok()) return be.status();
      backend = std::move(*be);
    }
    auto stage = Stage::Create(*source_, so, std::move(backend));
    if (!stage.ok()) return stage.status();
    resp->set_backend((*stage)->backend().name());
    resp->set_kv_bytes(KvCache::BytesFor((*stage)->kv_cache().options()));
    resp->set_weight_bytes((*stage)->weights().matrix_bytes());

    FrameExpectations e;
    e.plan_id = req.plan_id();
    e.stage = static_cast<uint32_t>(req.stage_index());
    e.first_stage = req.stage_index() == 0;
    e.dim = c.dim;
    e.vocab_size = c.vocab_size;
    e.max_tokens = req.max_batch_tokens();
    e.context_length = c.context_length;
    auto inbox = std::make_shared<FrameInbox>(e);
    std::unique_ptr<ActivationSender> out;
    std::shared_ptr<ResultSender> results;
    if (last) {
      results = MakeResultSender(req.coordinator_address());
    } else {
      out = MakeActivationSender(req.next_address());
    }
    executor_ = std::make_unique<StageExecutor>(
        std::move(*stage), static_cast<uint32_t>(req.stage_index()), req.plan_id(),
        inbox->MakeReceiver(), std::move(out), std::move(results));
    executor_->Start();
    inbox_ = inbox;
    pipe_->SetInbox(inbox);
    plan_id_ = req.plan_id();
    stage_index_ = req.stage_index();
    range_ = so.layers;
    return absl::OkStatus();
  }

  void UnloadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pipe_->SetInbox(nullptr);
    if (inbox_) inbox_->Close();
    if (executor_) executor_->Stop();
    executor_.reset();
    inbox_.reset();
  }

  const WorkerOptions& options_;
  StagePipeService* pipe_;
  std::mutex mu_;
  std::unique_ptr<ModelSource> source_ ABSL_GUARDED_BY(mu_);
  std::string source_path_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<FrameInbox> inbox_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StageExecutor> executor_ ABSL_GUARDED_BY(mu_);
  v1::WorkerState state_ ABSL_GUARDED_BY(mu_) = v1::WORKER_STATE_IDLE;
  std::string error_ ABSL_GUARDED_BY(mu_);
  uint64_t plan_id_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t stage_index_ ABSL_GUARDED_BY(mu_) = -1;
  LayerRange range_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerOptions& options) {
  std::unique_ptr<WorkerServer> w(new WorkerServer());
  w->options_ = options;
  if (w->options_.node.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    w->options_.node = host;
  }
  w->worker_service_ = std::make_unique<WorkerServiceImpl>(w->options_, &w->pipe_service_);
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(w->worker_service_.get());
  builder.RegisterService(&w->pipe_service_);
  w->server_ = builder.BuildAndStart();
  if (!w->server_ || port == 0) {
    return absl::UnavailableError(absl::StrCat("worker: cannot listen on ", options.listen));
  }
  if (w->options_.advertise.empty()) {
    std::string host = options.listen.substr(0, options.listen.rfind(':'));
    if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = "127.0.0.1";
    w->advertise_ = absl::StrCat(host, ":", port);
  } else {
    w->advertise_ = w->options_.advertise;
  }
  if (w->options_.worker_id.empty()) w->options_.worker_id = w->advertise_;
  if (w->options_.data_listen != "off") {
    auto data =
        TcpFrameServer::StartBeside(w->options_.data_listen, options.listen, "worker data plane",
                                    ActivationHandler(&w->pipe_service_));
    if (!data.ok()) return data.status();
    w->data_server_ = std::move(*data);
    w->data_advertise_ = w->data_server_->AdvertisedAddress(w->advertise_);
  }
  spdlog::info("worker {} listening on {} (data plane: {})", w->options_.worker_id, w->advertise_,
               w->data_advertise_.empty() ? "gRPC only" : w->data_advertise_);
  if (!w->options_.coordinator.empty()) {
    w->registration_ = std::thread([p = w.get()] { p->RegistrationLoop(); });
  }
  return w;
}

WorkerServer::~WorkerServer() { Shutdown(); }

void WorkerServer::Wait() {
  if (server_) server_->Wait();
}

void WorkerServer::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  cv_.notify_all();
  if (registration_.joinable()) registration_.join();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  // Unloading closes the stage's inbox, so no data-plane thread stays blocked on it.
  worker_service_.reset();
  if (data_server_) data_server_->Shutdown();
}

v1::WorkerResources WorkerServer::Resources() const {
  v1::WorkerResources r;
  r.set_cores(options_.threads);
  r.set_memory_bytes(options_.memory_bytes > 0 ? options_.memory_bytes : AvailableMemoryBytes());
  r.set_gflops(options_.gflops > 0 ? options_.gflops : options_.threads);
  v1::Device* cpu = r.add_devices();
  cpu->set_kind("cpu");
  cpu->set_name(DetectCpuFeatures().model_name);
  cpu->set_memory_bytes(r.memory_bytes());
  for (const GpuInfo& g : ListGpus(nullptr)) {
    v1::Device* d = r.add_devices();
    d->set_kind("cuda");
    d->set_index(g.index);
    d->set_name(g.name);
    d->set_memory_bytes(g.total_bytes);
    d->set_free_bytes(g.free_bytes);
  }
  return r;
}

void WorkerServer::RegistrationLoop() {
  auto channel = MakeChannel(options_.coordinator);
  auto stub = v1::Coordinator::NewStub(channel);
  uint64_t session = 0;
  double interval = 1.0;
  bool registered = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(registered ? int(interval * 1000) : 200),
                       [&] { return shutdown_; })) {
        return;
      }
    }
    if (!registered) {
      v1::RegisterRequest req;
      req.set_protocol_version(kFrameVersion);
      req.set_worker_id(options_.worker_id);
      req.set_node(options_.node);
      req.set_listen_address(advertise_);
      req.set_data_address(data_advertise_);
      *req.mutable_resources() = Resources();
      v1::RegisterResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      grpc::Status st = stub->Register(&ctx, req, &resp);
      if (st.ok()) {
        registered = true;
        session = resp.session();
        interval = resp.heartbeat_interval_s() > 0 ? resp.heartbeat_interval_s() : 1.0;
        spdlog::info("registered with coordinator {} as {}", options_.coordinator,
                     resp.worker_id());
      }
      continue;
    }
    v1::HeartbeatRequest hb;
    hb.set_worker_id(options_.worker_id);
    hb.set_session(session);
    worker_service_->HeartbeatInfo(&hb);
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status st = stub->Heartbeat(&ctx, hb, &resp);
    if (st.ok() && !resp.known()) {
      spdlog::warn("coordinator does not know this worker; registering again");
      registered = false;
    } else if (!st.ok()) {
      spdlog::debug("heartbeat failed: {}", st.error_message());
    }
  }
}

}  // namespace cascade
