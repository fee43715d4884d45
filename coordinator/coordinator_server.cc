#include "coordinator/coordinator_server.h"

#include "absl/strings/str_cat.h"
#include "coordinator/replica_set.h"
#include "coordinator/leadership.h"
#include "coordinator/control_service.h"
#include "coordinator/http_api.h"
#include "grpc/health/v1/health.pb.h"
#include "coordinator/prometheus.h"
#include "coordinator/inference_service.h"
#include "coordinator/result_router.h"
#include "coordinator/served_model.h"
#include "coordinator/worker_client.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "transport/address.h"
#include "transport/data_plane_server.h"
#include "transport/factory.h"
#include "transport/grpc_link.h"
#include "transport/grpc_util.h"
#include "util/status_macros.h"
#include "transport/security.h"
#include "util/logging.h"
#include "util/secret.h"

namespace cascade {

// What the API adapters see of the coordinator.
class ClusterServingTarget : public ServingTarget {
 public:
  // `leading()`: OK while this coordinator may serve (it leads, or runs alone), else why not.
  ClusterServingTarget(const ServedModel& model, ReplicaSet& replicas,
                       std::function<absl::Status()> leading)
      : model_(model), replicas_(replicas), leading_(std::move(leading)) {}
  const ServedModel& model() const override { return model_; }
  absl::StatusOr<std::shared_ptr<Scheduler>> SchedulerFor(
      std::span<const int32_t> prompt) const override {
    if (absl::Status st = leading_(); !st.ok()) return st;
    return replicas_.SchedulerFor(prompt);
  }
  v1::ModelInfo model_info() const override {
    v1::ModelInfo info = model_.Info();
    const ReplicaSetSnapshot s = replicas_.Snapshot();
    size_t stages = 0;  // a replica's (the first that has a plan)
    for (const ClusterSnapshot& r : s.replicas) {
      if (stages == 0) stages = r.plan.stages.size();
    }
    info.set_stages(static_cast<int32_t>(stages));
    info.set_ready(s.state == ClusterState::kServing);
    return info;
  }

 private:
  const ServedModel& model_;
  ReplicaSet& replicas_;
  const std::function<absl::Status()> leading_;
};

class CoordinatorServer::Impl {
 public:

  Impl(const ClusterConfig& config, std::function<void(const std::string&)> on_lost)
      : config_(config), on_lost_(std::move(on_lost)) {}
  ~Impl() { Shutdown(); }

  absl::Status Start() {
    if (absl::Status st = SetTransportSecurity({config_.security.tls_cert, config_.security.tls_key,
                                                config_.security.tls_ca});
        !st.ok()) {
      return st;
    }
    std::string api_key;
    if (!config_.security.join_token_file.empty()) {
      auto t = ReadSecretFile(config_.security.join_token_file);
      if (!t.ok()) return t.status();
      join_token_ = std::move(*t);
    }
    if (!config_.security.api_key_file.empty()) {
      auto k = ReadSecretFile(config_.security.api_key_file);
      if (!k.ok()) return k.status();
      api_key = std::move(*k);
    }
    if (join_token_.empty() && !TlsEnabled()) {
      spdlog::warn(
          "the control plane takes any worker that registers (no --join-token-file, no "
          "--tls-*): run it only on loopback or a network you trust");
    }
    auto model = ServedModel::Open(config_.model, config_.served_model_name, config_.chat_template);
    if (!model.ok()) return model.status();
    model_ = std::move(*model);
    if (absl::Status st = OpenDraft(); !st.ok()) return st;
    replicas_ = std::make_unique<ReplicaSet>(
        config_, *model_, &worker_client_,
        [](const std::string& address, const SenderOptions& options) {
          return MakeActivationSender(address, options);
        },
        &results_, join_token_);
    worker_client_.SetCoordinatorSecret(replicas_->coordinator_secret());
    serving_target_ = std::make_unique<ClusterServingTarget>(*model_, *replicas_,
                                                             [this] { return MayServe(); });
    control_ = std::make_unique<ControlService>(
        replicas_.get(), model_->id(), [this](v1::ClusterStatusResponse* s) { FillLeadership(s); });
    result_sink_ = std::make_unique<ResultSinkService>(
        [r = &results_](const v1::StepResult& result, const std::string& peer) {
          return r->OnResult(result, peer);
        });
    inference_ = std::make_unique<InferenceServiceImpl>(serving_target_.get(), api_key);

    // The public API: Inference, health, reflection.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    // Reflection describes services from the linked descriptor pool; gRPC's built-in
    // health service brings none, so link ours (proto/grpc/health/v1) by using it.
    (void)grpc::health::v1::HealthCheckRequest::descriptor();
    CASCADE_ASSIGN_OR_RETURN(StartedServer pub,
                             StartServer("public gRPC", config_.server.listen,
                                         ServerCredentials(ServerRole::kPublic), {inference_.get()},
                                         "--listen"));
    server_ = std::move(pub.server);
    address_ = AdvertisedHostPort(config_.server.listen, pub.port);
    SetHealth(false);
    // The control plane, on a port of its own: only cluster members (join token or a
    // client certificate from the CA) get past it.
    CASCADE_ASSIGN_OR_RETURN(StartedServer control,
                             StartServer("control", config_.server.control_listen,
                                         ServerCredentials(ServerRole::kCluster),
                                         {control_.get(), result_sink_.get()},
                                         "--control-listen"));
    control_server_ = std::move(control.server);
    control_address_ = AdvertisedHostPort(config_.server.control_listen, control.port);
    const std::string advertise =
        config_.server.advertise.empty() ? control_address_ : config_.server.advertise;
    replicas_->OnStateChange([this](ClusterState s) {
      SetHealth(s == ClusterState::kServing);
      if (s == ClusterState::kServing && leadership_) OfferPlan();
    });

    // Results from the last stage: on the TCP or MPI data plane, or on the ResultSink
    // stream served beside the control service (gRPC data plane); either way to the
    // router, which hands each to the scheduler of the pipeline it names.
    std::string results_address = advertise;
    if (config_.data_plane.kind != DataPlane::kGrpc) {
      const bool mpi = config_.data_plane.kind == DataPlane::kMpi;
      DataPlaneServerOptions dp;
      dp.name = "coordinator data plane";
      if (mpi) {
        dp.registered = Scheme::kMpi;
      } else {
        CASCADE_ASSIGN_OR_RETURN(HostPort adv, ParseHostPort(advertise));
        dp.tcp_listen = DataListenBeside(config_.data_plane.listen, config_.server.control_listen);
        dp.advertise_host = adv.host;
      }
      DataPlaneHandlers h;
      h.results = [this](const v1::StepResult& r, const std::string& peer) {
        return results_.OnResult(r, peer);
      };
      CASCADE_ASSIGN_OR_RETURN(data_, DataPlaneServer::Start(dp, std::move(h)));
      results_address = mpi ? data_->registered_address() : data_->tcp_address();
    }
    if (!config_.server.http.listen.empty()) {
      HttpApiOptions http;
      http.api_key = api_key;
      http.cors_origin = config_.server.cors_origin;
      http.metrics = [this] {
        v1::ClusterStatusResponse status;
        FillClusterStatus(replicas_->Snapshot(), model_->id(), &status);
        FillLeadership(&status);
        return RenderPrometheus(replicas_->ServingMetricsSnapshot(), status);
      };
      auto started = HttpApi::Start(serving_target_.get(), config_.server.http, std::move(http));
      if (!started.ok()) return started.status();
      http_ = std::move(*started);
    }
    spdlog::info("coordinator: {} (workers send results to {}){}", Addresses(), results_address,
                 TlsEnabled() ? "; mTLS" : "");
    if (config_.ha.etcd.empty()) {
      replicas_->Start(results_address);
      return absl::OkStatus();
    }
    return Campaign(advertise, results_address);
  }

  // With --etcd: stand by until elected, then bring the cluster up.
  absl::Status Campaign(const std::string& advertise, const std::string& results_address) {
    Leadership::Hooks hooks;
    hooks.on_elected = [this, results_address](int64_t epoch,
                                               const std::vector<std::string>& order) {
      // The previous leader's stage order: the same stages land on the same workers,
      // whatever order they register in, and keep their weights.
      replicas_->PreferWorkerOrder(order);
      replicas_->registrar().Lead(static_cast<uint64_t>(epoch));
      std::string addresses = absl::StrCat("grpc=", address_);
      if (http_) {
        absl::StrAppend(&addresses, " http=",
                        AdvertisedHostPort(config_.server.http.listen, http_->port()));
      }
      leadership_->OfferAddresses(addresses);
      replicas_->Start(results_address);
    };
    hooks.on_lost = [this](const std::string& why) {
      replicas_->registrar().StandBy([l = leadership_.get()] { return l->leader(); });
      SetHealth(false);
      // At once: a successor may drive the workers already. Their stages stay loaded.
      replicas_->Abandon(absl::UnavailableError(absl::StrCat(
          "this coordinator lost the leadership (", why, "); resume on the new leader")));
      if (on_lost_) std::thread([fn = on_lost_, why] { fn(why); }).detach();
    };
    CASCADE_ASSIGN_OR_RETURN(leadership_, Leadership::Create(config_.ha, advertise, hooks));
    replicas_->registrar().StandBy([l = leadership_.get()] { return l->leader(); });
    leadership_->Start();
    return absl::OkStatus();
  }

  // `--speculative draft` and `--draft-model` go together; the draft model is opened (and
  // its vocabulary checked against the model's) before anything listens.
  absl::Status OpenDraft() {
    const bool drafting = config_.scheduler.speculative == Speculative::kDraft;
    if (drafting && config_.draft.model.empty()) {
      return absl::InvalidArgumentError("--speculative draft needs --draft-model PATH");
    }
    if (!drafting && !config_.draft.model.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--draft-model is used only with --speculative draft (it is ",
          SpeculativeName(config_.scheduler.speculative), ")"));
    }
    if (!drafting) return absl::OkStatus();
    DraftModelOptions options;
    options.threads = config_.draft.threads;
    options.sequences = kSpecMaxRunning;
    return model_->OpenDraft(config_.draft.model, options);
  }

  // OK while this coordinator may serve clients: it runs alone, or leads.
  absl::Status MayServe() const {
    return leadership_ ? leadership_->MayServe() : absl::OkStatus();
  }

  void FillLeadership(v1::ClusterStatusResponse* out) const {
    if (leadership_) leadership_->Fill(out->mutable_leadership());
  }

  // What a successor needs of the plan: its workers in stage order (replica by replica).
  void OfferPlan() {
    std::vector<std::string> ids;
    for (const ClusterSnapshot& r : replicas_->Snapshot().replicas) {
      for (const StagePlan& stage : r.plan.stages) {
        if (stage.worker >= 0 && static_cast<size_t>(stage.worker) < r.plan_workers.size()) {
          ids.push_back(r.plan_workers[stage.worker].id);
        }
      }
    }
    leadership_->OfferPlan(ids);
  }

  std::string Addresses() const {
    std::string out = absl::StrCat("public gRPC ", address_);
    if (http_) {
      absl::StrAppend(&out, ", HTTP http://",
                      AdvertisedHostPort(config_.server.http.listen, http_->port()));
    }
    absl::StrAppend(&out, ", control ", control_address_);
    return out;
  }
  const std::string& address() const { return address_; }
  const std::string& control_address() const { return control_address_; }
  const std::string& join_token() const { return join_token_; }
  int http_port() const { return http_ ? http_->port() : 0; }

  absl::Status WaitUntilServing(std::chrono::milliseconds timeout) {
    if (!replicas_->WaitForState(
            {ClusterState::kServing, ClusterState::kStopped, ClusterState::kDegraded}, timeout)) {
      return absl::DeadlineExceededError("the cluster is not serving yet");
    }
    auto s = replicas_->SchedulerFor({});
    return s.ok() ? absl::OkStatus() : s.status();
  }

  void Drain(std::chrono::milliseconds timeout) {
    if (replicas_) replicas_->Drain(timeout);
    Shutdown();
  }

  void Shutdown() {
    if (shut_down_.exchange(true)) return;
    if (replicas_) replicas_->Shutdown();
    if (leadership_) leadership_->Resign();  // a standby need not wait for the lease
    if (http_) http_->Stop();
    if (server_) {
      SetHealth(false);
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    }
    if (control_server_) {
      control_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    }
    if (data_) data_->Shutdown();
  }

 private:
  void SetHealth(bool serving) {
    if (!server_) return;
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(serving);
      health->SetServingStatus("cascade.v1.Inference", serving);
    }
  }

  const ClusterConfig config_;
  std::unique_ptr<ServedModel> model_;
  GrpcWorkerClient worker_client_;
  // Where every transport hands the results; outlives the servers and the controller.
  ResultRouter results_;
  std::unique_ptr<ReplicaSet> replicas_;  // the pipelines (one unless --replicas)
  std::unique_ptr<ClusterServingTarget> serving_target_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<ResultSinkService> result_sink_;  // the gRPC data plane's results
  std::unique_ptr<InferenceServiceImpl> inference_;
  std::unique_ptr<grpc::Server> server_;          // public
  std::unique_ptr<grpc::Server> control_server_;  // workers
  std::unique_ptr<DataPlaneServer> data_;
  std::unique_ptr<HttpApi> http_;
  std::string address_, control_address_;
  std::string join_token_;  // "" when any worker may register
  std::atomic<bool> shut_down_{false};
  const std::function<void(const std::string&)> on_lost_;
  std::unique_ptr<Leadership> leadership_;  // with --etcd
};

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorServer::~CoordinatorServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const ClusterConfig& config, std::function<void(const std::string&)> on_lost_leadership) {
  if (config.model.empty()) return absl::InvalidArgumentError("coordinator: no model given (--model)");
  auto impl = std::make_unique<Impl>(config, std::move(on_lost_leadership));
  if (absl::Status st = impl->Start(); !st.ok()) return st;
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(std::move(impl)));
}

const std::string& CoordinatorServer::address() const { return impl_->address(); }
const std::string& CoordinatorServer::control_address() const { return impl_->control_address(); }
int CoordinatorServer::http_port() const { return impl_->http_port(); }
std::string CoordinatorServer::Addresses() const { return impl_->Addresses(); }
const std::string& CoordinatorServer::join_token() const { return impl_->join_token(); }
absl::Status CoordinatorServer::WaitUntilServing(std::chrono::milliseconds t) {
  return impl_->WaitUntilServing(t);
}
void CoordinatorServer::Drain(std::chrono::milliseconds timeout) {
  if (impl_) impl_->Drain(timeout);
}
void CoordinatorServer::Shutdown() {
  if (impl_) impl_->Shutdown();
}

}  // namespace cascade
