#include "coordinator/coordinator_server.h"

#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cascade/v1/worker.grpc.pb.h"
#include "coordinator/http_api.h"
#include "coordinator/inference_service.h"
#include "coordinator/planner.h"
#include "coordinator/registry.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "nlohmann/json.hpp"
#include "util/logging.h"
#include "worker/grpc_link.h"
#include "worker/grpc_util.h"
#include "worker/tcp_link.h"

namespace cascade {

namespace {

// The chat template of a model: GGUF tokenizer.chat_template, or chat_template in a
// Hugging Face folder's tokenizer_config.json.
std::string ReadChatTemplate(const ModelSource& source) {
  if (source.gguf() != nullptr)
    return source.gguf()->GetString("tokenizer.chat_template").value_or("");
  auto text = ReadFileToString(source.hf_dir() + "/tokenizer_config.json", 64 << 20);
  if (!text.ok()) return "";
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  auto it = j.find("chat_template");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

class CoordinatorServer::Impl final : public v1::Coordinator::Service, public ServingBackend {
 public:
  explicit Impl(const CoordinatorOptions& o)
      : options_(o),
        registry_(std::random_device{}() | 1, o.heartbeat_interval_s),
        inference_(this),
        http_(this),
        started_(std::chrono::steady_clock::now()) {}

  ~Impl() override { Shutdown(); }

  absl::Status Start() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    ConfigureServer(&builder);
    int port = 0;
    builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(static_cast<v1::Coordinator::Service*>(this));
    builder.RegisterService(&inference_);
    server_ = builder.BuildAndStart();
    if (!server_ || port == 0) {
      return absl::UnavailableError(
          absl::StrCat("coordinator: cannot listen on ", options_.listen));
    }
    std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
    if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = "127.0.0.1";
    address_ = absl::StrCat(host, ":", port);
    if (options_.advertise.empty()) options_.advertise = address_;
    results_address_ = options_.advertise;
    if (options_.data_plane == "tcp") {
      auto data = TcpFrameServer::StartBeside(
          options_.data_listen, options_.listen, "coordinator data plane",
          [this](TcpFrameKind kind, const std::string& body, const std::string& peer,
                 const TcpFrameServer::Reply&) -> absl::Status {
            v1::StepResult wire;
            if (kind != TcpFrameKind::kResult) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "a ", TcpFrameKindName(kind), " frame on the coordinator's data port"));
            }
            if (!wire.ParseFromString(body)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("undecodable step result (", body.size(), " bytes)"));
            }
            HandleResult(wire, peer);
            return absl::OkStatus();
          });
      if (!data.ok()) return data.status();
      data_server_ = std::move(*data);
      results_address_ = data_server_->AdvertisedAddress(options_.advertise);
    } else if (options_.data_plane != "grpc") {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator: data plane '", options_.data_plane, "' is neither tcp nor grpc"));
    }
    SetHealth(false);
    spdlog::info("coordinator listening on {} (workers send results to {})", address_,
                 results_address_);
    if (!options_.http_listen.empty()) {
      if (absl::Status st = http_.Start(options_.http_listen); !st.ok()) return st;
    }
    bring_up_ = std::thread([this] { BringUp(); });
    return absl::OkStatus();
  }

  const std::string& address() const { return address_; }

  absl::Status WaitUntilServing(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return serving_ || !bring_up_error_.ok(); })) {
      return absl::DeadlineExceededError("the cluster is not serving yet");
    }
    return bring_up_error_;
  }

  void Wait() {
    if (server_) server_->Wait();
  }

  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    cv_.notify_all();
    if (bring_up_.joinable()) bring_up_.join();
    std::shared_ptr<Scheduler> sched;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sched = scheduler_;
    }
    if (sched) sched->Stop();  // also closes the link to the first stage
    if (server_)
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    if (data_server_) data_server_->Shutdown();
  }

  // ---- ServingBackend ----
  absl::StatusOr<std::shared_ptr<Scheduler>> scheduler() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (scheduler_) return scheduler_;
    if (!bring_up_error_.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the cluster failed to start: ", bring_up_error_.message()));
    }
    return absl::UnavailableError(absl::StrCat("the model is loading: ", phase_));
  }
  const Tokenizer* tokenizer() override {
    return tokenizer_ready_.load() ? tokenizer_.get() : nullptr;
  }
  v1::ModelInfo model_info() override {
    v1::ModelInfo info;
    info.set_id(model_id_);
    if (tokenizer_ready_.load()) {
      const ModelConfig& c = source_->config();
      info.set_architecture(c.arch);
      info.set_parameters(c.ParameterCount());
      info.set_context_length(static_cast<int32_t>(c.context_length));
      info.set_vocab_size(static_cast<int32_t>(c.vocab_size));
      info.set_layers(static_cast<int32_t>(c.n_layers));
    }
    std::lock_guard<std::mutex> lock(mu_);
    info.set_stages(static_cast<int32_t>(plan_.stages.size()));
    info.set_ready(serving_);
    return info;
  }

  std::string chat_template() override {
    return tokenizer_ready_.load() ? chat_template_ : std::string();
  }

  // ---- Coordinator service ----
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override {
    if (req->worker_id().empty() || req->listen_address().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "worker_id and listen_address are required");
    }
    if (req->protocol_version() != kFrameVersion) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("protocol version ", req->protocol_version(),
                                       " is not supported (", kFrameVersion, ")"));
    }
    *resp = registry_.Register(*req);
    spdlog::info("worker {} registered from {} ({} cores, {} memory)", req->worker_id(),
                 req->listen_address(), req->resources().cores(),
                 HumanBytes(req->resources().memory_bytes()));
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    resp->set_known(registry_.Heartbeat(*req));
    return grpc::Status::OK;
  }

  grpc::Status Results(grpc::ServerContext* ctx, grpc::ServerReader<v1::StepResult>* reader,
                       v1::ResultsAck*) override {
    v1::StepResult wire;
    while (reader->Read(&wire)) HandleResult(wire, ctx->peer());
    return grpc::Status::OK;
  }

  // A step result from the last stage, by either transport.
  void HandleResult(const v1::StepResult& wire, const std::string& peer) {
    std::shared_ptr<Scheduler> sched;
    uint64_t plan_id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sched = scheduler_;
      plan_id = plan_id_;
    }
    if (!sched) return;
    auto r = DecodeResult(wire, plan_id, source_->config().vocab_size);
    if (!r.ok()) {
      spdlog::warn("result from {} rejected: {}", peer, r.status().message());
      StepResult failed;
      failed.plan_id = plan_id;
      failed.batch_id = wire.batch_id();
      failed.error = std::string(r.status().message());
      sched->OnResult(std::move(failed));
      return;
    }
    sched->OnResult(std::move(*r));
  }

  grpc::Status ClusterStatus(grpc::ServerContext*, const v1::ClusterStatusRequest*,
                             v1::ClusterStatusResponse* resp) override {
    const auto now = std::chrono::steady_clock::now();
    std::vector<WorkerRecord> workers = registry_.All();
    for (const WorkerRecord& w : workers) {
      v1::WorkerInfo* wi = resp->add_workers();
      wi->set_worker_id(w.id);
      wi->set_node(w.node);
      wi->set_address(w.address);
      *wi->mutable_resources() = w.resources;
      wi->set_state(w.state);
      wi->set_seconds_since_heartbeat(std::chrono::duration<double>(now - w.last_seen).count());
    }
    std::lock_guard<std::mutex> lock(mu_);
    resp->set_model(model_id_);
    resp->set_serving(serving_);
    resp->set_plan_id(plan_id_);
    if (!bring_up_error_.ok()) resp->set_error(std::string(bring_up_error_.message()));
    for (size_t i = 0; i < plan_.stages.size(); ++i) {
      const StagePlan& s = plan_.stages[i];
      v1::StageStatus* ss = resp->add_stages();
      ss->set_index(static_cast<int32_t>(i));
      ss->set_first_layer(s.layers.first);
      ss->set_last_layer(s.layers.last);
      ss->set_planned_bytes(s.memory.total());
      const WorkerSpec& spec = plan_workers_[s.worker];
      ss->set_worker_id(spec.id);
      ss->set_address(spec.address);
      ss->set_data_address(DataAddress(spec));
      for (const WorkerRecord& w : workers) {
        if (w.id != spec.id) continue;
        ss->set_state(w.state);
        *ss->mutable_stats() = w.stats;
        ss->set_alive(now - w.last_seen < std::chrono::milliseconds(static_cast<int>(
                                              5000 * options_.heartbeat_interval_s)));
      }
    }
    if (scheduler_) {
      const SchedulerStats st = scheduler_->Stats();
      v1::SchedulerStatus* o = resp->mutable_scheduler();
      o->set_waiting(st.waiting);
      o->set_running(st.running);
      o->set_in_flight_batches(st.in_flight_batches);
      o->set_kv_blocks_reserved(st.kv_blocks_reserved);
      o->set_kv_blocks_total(plan_.kv_blocks);
      o->set_completed(st.completed);
      o->set_failed(st.failed);
      o->set_rejected(st.rejected);
      o->set_generated_tokens(st.generated_tokens);
      o->set_prompt_tokens(st.prompt_tokens);
      o->set_uptime_s(std::chrono::duration<double>(now - started_).count());
    }
    return grpc::Status::OK;
  }

 private:
  void SetHealth(bool serving) {
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(serving);
      health->SetServingStatus("cascade.v1.Inference", serving);
    }
  }

  void SetPhase(const std::string& p) {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = p;
    spdlog::info("bring-up: {}", p);
  }

  void Fail(const absl::Status& st) {
    spdlog::error("bring-up failed: {}", st.message());
    std::lock_guard<std::mutex> lock(mu_);
    bring_up_error_ = st;
    cv_.notify_all();
  }

  bool ShuttingDown() {
    std::lock_guard<std::mutex> lock(mu_);
    return shut_down_;
  }

  void BringUp() {
    SetPhase("reading the model");
    auto src = ModelSource::Open(options_.model_path);
    if (!src.ok()) return Fail(src.status());
    source_ = std::move(*src);
    auto tok = source_->gguf() ? Tokenizer::FromGguf(*source_->gguf())
                               : Tokenizer::FromPath(source_->hf_dir());
    if (!tok.ok()) return Fail(tok.status());
    tokenizer_ = std::move(*tok);
    model_id_ = source_->config().name.empty() ? options_.model_path : source_->config().name;
    chat_template_ = ReadChatTemplate(*source_);
    tokenizer_ready_.store(true);

    SetPhase(absl::StrCat("waiting for ", options_.workers, " worker(s)"));
    const auto deadline = std::chrono::steady_clock::now() + options_.worker_wait;
    while (registry_.WaitForWorkers(options_.workers,
                                    std::min(deadline, std::chrono::steady_clock::now() +
                                                           std::chrono::milliseconds(200))) <
           static_cast<size_t>(options_.workers)) {
      if (ShuttingDown()) return;
      if (std::chrono::steady_clock::now() > deadline) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            "only ", registry_.All().size(), " of ", options_.workers, " workers registered")));
      }
    }
    std::vector<WorkerSpec> specs;
    for (const WorkerRecord& w : registry_.All()) {
      WorkerSpec s;
      s.id = w.id;
      s.address = w.address;
      s.data_address = w.data_address;
      s.node = w.node;
      s.memory_bytes = w.resources.memory_bytes();
      s.gflops = w.resources.gflops() > 0 ? w.resources.gflops() : 1.0;
      specs.push_back(s);
    }
    SetPhase("planning");
    const ModelConfig& c = source_->config();
    PlanLimits lim;
    lim.kv_block_size = options_.kv_block_size;
    lim.batch_tokens = options_.max_batch_tokens;
    lim.min_stages = options_.min_stages;
    lim.kv_tokens = options_.kv_tokens > 0 ? options_.kv_tokens
                                           : int64_t{options_.kv_sequences} * c.context_length;
    auto plan = MakePlan(ProfileFromSource(*source_), specs, lim);
    if (!plan.ok()) return Fail(plan.status());
    spdlog::info("plan:\n{}", plan->Table(ProfileFromSource(*source_), specs));
    const uint64_t plan_id = std::random_device{}() | 1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      plan_ = *plan;
      plan_workers_ = specs;
      plan_id_ = plan_id;
    }
    // Load the stages, last first.
    const int S = static_cast<int>(plan->stages.size());
    for (int i = S - 1; i >= 0; --i) {
      if (ShuttingDown()) return;
      const StagePlan& sp = plan->stages[i];
      SetPhase(absl::StrCat("loading stage ", i, " on ", specs[sp.worker].id));
      v1::LoadStageRequest req;
      req.set_plan_id(plan_id);
      req.set_model_path(options_.model_path);
      req.set_stage_index(i);
      req.set_num_stages(S);
      req.set_first_layer(sp.layers.first);
      req.set_last_layer(sp.layers.last);
      req.set_kv_blocks(plan->kv_blocks);
      req.set_kv_block_size(options_.kv_block_size);
      req.set_max_batch_tokens(static_cast<int32_t>(options_.max_batch_tokens));
      if (i + 1 < S) req.set_next_address(DataAddress(specs[plan->stages[i + 1].worker]));
      req.set_coordinator_address(results_address_);
      req.set_threads(options_.threads_per_stage);
      req.set_device(options_.device);
      auto stub = v1::Worker::NewStub(MakeChannel(specs[sp.worker].address));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(30));
      v1::LoadStageResponse resp;
      grpc::Status st = stub->LoadStage(&ctx, req, &resp);
      if (!st.ok()) {
        return Fail(absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                                 absl::StrCat("loading stage ", i, " on ", specs[sp.worker].id,
                                              ": ", st.error_message())));
      }
    }
    SchedulerOptions so;
    so.plan_id = plan_id;
    so.num_stages = S;
    so.kv_blocks = plan->kv_blocks;
    so.kv_block_size = options_.kv_block_size;
    so.max_batch_tokens = options_.max_batch_tokens;
    so.prefill_chunk = options_.prefill_chunk;
    so.max_running = options_.max_running;
    so.max_waiting = options_.max_waiting;
    so.context_length = c.context_length;
    so.vocab_size = c.vocab_size;
    // The scheduler owns the link to stage 0 and closes it when it stops.
    auto sched = std::make_shared<Scheduler>(so, *tokenizer_,
                                             std::shared_ptr<ActivationSender>(MakeActivationSender(
                                                 DataAddress(specs[plan->stages[0].worker]))));
    sched->Start();
    {
      std::lock_guard<std::mutex> lock(mu_);
      scheduler_ = sched;
      serving_ = true;
      phase_ = "serving";
    }
    SetHealth(true);
    cv_.notify_all();
    spdlog::info("serving {} on {} stage(s)", model_id_, S);
    Monitor(specs, *plan);
  }

  // Where frames for a worker's stage go: its TCP data plane when this coordinator uses
  // TCP and the worker has one, else its StagePipe service.
  std::string DataAddress(const WorkerSpec& w) const {
    return options_.data_plane == "tcp" && !w.data_address.empty() ? w.data_address : w.address;
  }

  // Watches the workers of the plan. A stage whose worker stops sending heartbeats (or
  // reports a failure) takes the pipeline down: running requests fail at once with
  // UNAVAILABLE naming the stage, health goes NOT_SERVING, and new requests are refused
  // with the reason instead of hanging.
  void Monitor(const std::vector<WorkerSpec>& specs, const Plan& plan) {
    const auto timeout = std::chrono::milliseconds(
        static_cast<int64_t>(1000 * (3 * options_.heartbeat_interval_s + 1)));
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return shut_down_; })) {
          return;
        }
      }
      const auto now = std::chrono::steady_clock::now();
      std::string problem;
      for (size_t i = 0; i < plan.stages.size() && problem.empty(); ++i) {
        const WorkerSpec& spec = specs[plan.stages[i].worker];
        for (const WorkerRecord& w : registry_.All()) {
          if (w.id != spec.id) continue;
          if (now - w.last_seen > timeout) {
            problem = absl::StrCat("stage ", i, " (worker ", w.id, " at ", w.address,
                                   ") stopped responding");
          } else if (w.state == v1::WORKER_STATE_FAILED) {
            problem = absl::StrCat("stage ", i, " (worker ", w.id, ") failed: ", w.error);
          }
        }
      }
      if (problem.empty()) continue;
      spdlog::error("{}; the pipeline is down", problem);
      std::shared_ptr<Scheduler> sched;
      {
        std::lock_guard<std::mutex> lock(mu_);
        sched = std::move(scheduler_);
        serving_ = false;
        bring_up_error_ = absl::UnavailableError(problem);
        phase_ = problem;
      }
      SetHealth(false);
      if (sched) {
        sched->FailAll(absl::UnavailableError(absl::StrCat(problem, "; request aborted")));
        sched->Stop();
      }
      return;
    }
  }

  CoordinatorOptions options_;
  WorkerRegistry registry_;
  InferenceServiceImpl inference_;
  HttpApi http_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<TcpFrameServer> data_server_;  // results over TCP; null with --data-plane grpc
  std::string address_;
  std::string results_address_;  // what the last stage is told to send results to
  std::thread bring_up_;
  const std::chrono::steady_clock::time_point started_;

  // Written once by bring-up before tokenizer_ready_ is set; read-only after.
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string model_id_;
  std::string chat_template_;
  std::atomic<bool> tokenizer_ready_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status bring_up_error_ ABSL_GUARDED_BY(mu_);
  std::string phase_ ABSL_GUARDED_BY(mu_) = "starting";
  Plan plan_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerSpec> plan_workers_ ABSL_GUARDED_BY(mu_);
  uint64_t plan_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Scheduler> scheduler_ ABSL_GUARDED_BY(mu_);
};

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorServer::~CoordinatorServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& o) {
  if (o.model_path.empty()) return absl::InvalidArgumentError("coordinator: no model given");
  if (o.workers < 1) return absl::InvalidArgumentError("coordinator: --workers must be >= 1");
  auto impl = std::make_unique<Impl>(o);
  if (absl::Status st = impl->Start(); !st.ok()) return st;
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(std::move(impl)));
}

const std::string& CoordinatorServer::address() const { return impl_->address(); }
absl::Status CoordinatorServer::WaitUntilServing(std::chrono::milliseconds t) {
  return impl_->WaitUntilServing(t);
}
void CoordinatorServer::Wait() { impl_->Wait(); }
void CoordinatorServer::Shutdown() {
  if (impl_) impl_->Shutdown();
}

}  // namespace cascade
