#include "worker/worker_server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/gpu.h"
#include "transport/address.h"
#include "transport/frame.h"
#include "transport/grpc_util.h"
#include "util/status_macros.h"
#include "transport/security.h"
#include "util/logging.h"
#include "util/secret.h"
#include "util/system_memory.h"
#include "worker/tp_group.h"

namespace cascade {

// The Worker control-plane service: a thin adapter over the StageHost.
class WorkerServer::WorkerService final : public v1::Worker::Service {
 public:
  // `worker_id` is read at each call: it is final once the server has its port.
  WorkerService(StageHost* host, const std::string* worker_id, const WorkerServer* server)
      : host_(host), worker_id_(worker_id), server_(server) {}

  grpc::Status LoadStage(grpc::ServerContext* ctx, const v1::LoadStageRequest* req,
                         v1::LoadStageResponse* resp) override {
    if (grpc::Status auth = FromCoordinator(ctx); !auth.ok()) return auth;
    auto r = host_->Load(*req);
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    return grpc::Status::OK;
  }
  grpc::Status Unload(grpc::ServerContext* ctx, const v1::UnloadRequest* req,
                      v1::UnloadResponse*) override {
    if (grpc::Status auth = FromCoordinator(ctx); !auth.ok()) return auth;
    return ToGrpc(host_->Unload(req->plan_id()));
  }
  grpc::Status Drain(grpc::ServerContext* ctx, const v1::DrainRequest*,
                     v1::DrainResponse*) override {
    if (grpc::Status auth = FromCoordinator(ctx); !auth.ok()) return auth;
    host_->Drain();
    return grpc::Status::OK;
  }
  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest*,
                      v1::WorkerStatus* out) override {
    out->set_worker_id(*worker_id_);
    host_->FillStatus(out);
    return grpc::Status::OK;
  }

 private:
  // Only the coordinator this worker registered with may change its stage.
  grpc::Status FromCoordinator(const grpc::ServerContext* ctx) const {
    // The coordinator may call as soon as it has taken the registration, before its answer
    // (with the secret) is read here: wait for that a moment.
    if (server_->coordinator_secret().empty()) {
      server_->WaitRegistered(std::chrono::seconds(5));
    }
    const std::string secret = server_->coordinator_secret();
    if (secret.empty()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this worker has not registered with a coordinator");
    }
    if (!SecretsEqual(PresentedMetadata(*ctx, kCoordinatorMetadata), secret)) {
      spdlog::warn("refused a control call from {}: not from this worker's coordinator",
                   ctx->peer());
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "only the coordinator this worker registered with may do that");
    }
    return grpc::Status::OK;
  }

  StageHost* host_;
  const std::string* worker_id_;
  const WorkerServer* server_;
};

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerOptions& options) {
  std::unique_ptr<WorkerServer> w(new WorkerServer());
  w->options_ = options;
  if (w->options_.node.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    w->options_.node = host;
  }
  w->host_ = std::make_unique<StageHost>(
      StageHostOptions{.threads = options.threads,
                       .device = options.device,
                       .model_dir = options.model_dir,
                       .tp = options.tp},
      &w->router_);
  w->pipe_service_ = std::make_unique<StagePipeService>(&w->router_);
  w->worker_service_ =
      std::make_unique<WorkerService>(w->host_.get(), &w->options_.worker_id, w.get());
  CASCADE_ASSIGN_OR_RETURN(
      StartedServer started,
      StartServer("worker", options.listen, ServerCredentials(ServerRole::kCluster),
                  {w->worker_service_.get(), w->pipe_service_.get()}));
  w->server_ = std::move(started.server);
  const int port = started.port;
  w->advertise_ = w->options_.advertise.empty() ? AdvertisedHostPort(options.listen, port)
                                                : w->options_.advertise;
  if (w->options_.worker_id.empty()) w->options_.worker_id = w->advertise_;
  if (w->options_.data_listen == "mpi") {
    DataPlaneServerOptions dp;
    dp.name = "worker data plane";
    dp.registered = Scheme::kMpi;
    auto data = DataPlaneServer::Start(dp, {&w->router_, nullptr});
    if (!data.ok()) return data.status();
    w->data_ = std::move(*data);
    w->data_advertise_ = w->data_->registered_address();
  } else if (w->options_.data_listen != "off") {
    auto adv = ParseHostPort(w->advertise_);
    if (!adv.ok()) return adv.status();
    DataPlaneServerOptions dp;
    dp.name = "worker data plane";
    dp.tcp_listen = DataListenBeside(w->options_.data_listen, options.listen);
    dp.advertise_host = adv->host;
    auto data = DataPlaneServer::Start(dp, {&w->router_, nullptr});
    if (!data.ok()) return data.status();
    w->data_ = std::move(*data);
    w->data_advertise_ = w->data_->tcp_address();
    if (!w->options_.data_advertise.empty()) {
      const std::string& a = w->options_.data_advertise;
      w->data_advertise_ = a.rfind("tcp://", 0) == 0 ? a : "tcp://" + a;
      if (!ParseHostPort(w->data_advertise_.substr(6)).ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--data-advertise: '", a, "' is not host:port"));
      }
    }
  }
  spdlog::info("worker {} listening on {} (data plane: {})", w->options_.worker_id, w->advertise_,
               w->data_advertise_.empty() ? "gRPC only" : w->data_advertise_);
  if (!w->options_.coordinator.empty()) {
    w->registration_ = std::thread([p = w.get()] { p->RegistrationLoop(); });
  }
  return w;
}

WorkerServer::~WorkerServer() { Shutdown(); }

void WorkerServer::Drain() { host_->Drain(); }

bool WorkerServer::WaitRegistered(std::chrono::milliseconds timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registered_ || shutdown_; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), absl::FromChrono(timeout)) && registered_;
}

std::string WorkerServer::coordinator_secret() const {
  absl::MutexLock lock(&mu_);
  return coordinator_secret_;
}

void WorkerServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  if (registration_.joinable()) registration_.join();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  // Unloading closes the stage's inbox, so no data-plane thread stays blocked on it.
  if (host_) host_->Unload(0).IgnoreError();
  if (data_) data_->Shutdown();
}

v1::WorkerResources WorkerServer::Resources() const {
  v1::WorkerResources r;
  r.set_cores(options_.threads);
  r.set_memory_bytes(options_.memory_bytes > 0 ? options_.memory_bytes : AvailableMemoryBytes());
  // Without a memory of its own it reports the machine's, which other workers there share.
  r.set_node_id(MachineId());
  r.set_node_memory(options_.memory_bytes == 0);
  r.set_gflops(options_.gflops > 0 ? options_.gflops : options_.threads);
  r.set_cost_per_hour(options_.cost_per_hour);
  r.set_tensor_parallel(options_.tp != nullptr ? options_.tp->size() : 1);
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

// What the registration loop says about failed attempts, and the backoff between them:
// one line per change of the answer (another refusal, unreachable), a reminder at most
// once per kRegisterReminder in between, and one line when it registers after failing.
class WorkerServer::RegistrationLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RegistrationLog(std::string coordinator) : coordinator_(std::move(coordinator)) {}

  std::chrono::milliseconds backoff() const { return backoff_; }
  const std::string& last_error() const { return last_error_; }

  void Failed(const grpc::Status& st) {
    const bool unreachable = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    // Unreachable is one state whatever the transport's words; a refusal is its message.
    const std::string kind =
        unreachable ? "unreachable" : absl::StrCat(st.error_code(), ":", st.error_message());
    last_error_ = unreachable ? absl::StrCat("it does not answer (", st.error_message(), ")")
                              : absl::StrCat("it refused this worker: ", st.error_message());
    ++failures_;
    const auto now = Clock::now();
    if (kind != kind_) {
      kind_ = kind;
      logged_ = now;
      const std::string line = absl::StrCat(
          "registering with the coordinator at ", coordinator_, ": ", last_error_,
          "; trying again with backoff (", kFirstRegisterBackoff.count(), " ms doubling to ",
          (unreachable ? kMaxUnansweredBackoff : kMaxRegisterBackoff).count() / 1000,
          " s), logged again when the answer changes");
      if (unreachable) {
        spdlog::warn("{}", line);
      } else {
        spdlog::error("{}", line);
      }
    } else if (now - logged_ >= kRegisterReminder) {
      logged_ = now;
      spdlog::warn("still not registered with {} after {} attempts: {}", coordinator_, failures_,
                   last_error_);
    }
    // A coordinator that does not answer may be restarting: tried more often than one
    // that refuses, so that it has its workers back within seconds.
    backoff_ = std::min(backoff_ * 2, unreachable ? kMaxUnansweredBackoff : kMaxRegisterBackoff);
  }

  void Registered() {
    if (failures_ > 0) {
      spdlog::info("registered with {} after {} failed attempt(s)", coordinator_, failures_);
    }
    kind_.clear();
    last_error_.clear();
    failures_ = 0;
    backoff_ = kFirstRegisterBackoff;
  }

 private:
  const std::string coordinator_;
  std::chrono::milliseconds backoff_ = kFirstRegisterBackoff;
  std::string kind_;  // of the last failure ("" after a success)
  std::string last_error_;
  int failures_ = 0;  // in a row
  Clock::time_point logged_;
};

grpc::Status WorkerServer::TryRegister(v1::Coordinator::Stub& stub, v1::RegisterResponse* resp) {
  v1::RegisterRequest req;
  req.set_protocol_version(kFrameVersion);
  req.set_worker_id(options_.worker_id);
  req.set_node(options_.node);
  req.set_listen_address(advertise_);
  req.set_data_address(data_advertise_);
  *req.mutable_resources() = Resources();
  grpc::ClientContext ctx;
  if (!options_.join_token.empty()) ctx.AddMetadata(kJoinTokenMetadata, options_.join_token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return stub.Register(&ctx, req, resp);
}

grpc::Status WorkerServer::SendHeartbeat(v1::Coordinator::Stub& stub, uint64_t session,
                                         const std::string& session_secret,
                                         v1::HeartbeatResponse* resp) {
  v1::HeartbeatRequest hb;
  hb.set_worker_id(options_.worker_id);
  hb.set_session(session);
  hb.set_session_secret(session_secret);
  host_->FillHeartbeat(&hb);
  for (v1::GpuStats& g : gpus_.Sample()) *hb.add_gpus() = std::move(g);
  *hb.mutable_process() = process_.Sample();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + heartbeat_deadline_);
  return stub.Heartbeat(&ctx, hb, resp);
}

// The registration thread's view of the coordinators: every address it was given (one, or
// the leader and its standbys), which one it follows, and that registration's session.
struct WorkerServer::Following {
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  size_t current = 0;         // the coordinator tried or followed now
  size_t tried_in_round = 0;  // failed registrations since the last success or full round
  uint64_t epoch = 0;         // the newest leader's epoch followed
  bool registered = false;
  uint64_t session = 0;
  std::string session_secret;
  double interval = 1.0;  // between heartbeats, as the coordinator asks

  // Moves to the next coordinator of the list; true when a whole round has failed.
  bool Next() {
    current = (current + 1) % stubs.size();
    if (++tried_in_round < stubs.size()) return false;
    tried_in_round = 0;
    return true;
  }
};

grpc::Status WorkerServer::RegisterWith(Following& f, size_t which, v1::RegisterResponse* resp) {
  grpc::Status st = TryRegister(*f.stubs[which], resp);
  if (!st.ok() || resp->epoch() >= f.epoch) return st;
  // A deposed leader that has not noticed yet: refused, never gone back to.
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      absl::StrCat(f.addresses[which], " leads an older epoch (", resp->epoch(),
                                   ") than this worker has followed (", f.epoch, ")"));
}

void WorkerServer::Follow(Following& f, size_t which, const v1::RegisterResponse& resp) {
  f.current = which;
  f.registered = true;
  f.tried_in_round = 0;
  f.epoch = resp.epoch();
  f.session = resp.session();
  f.session_secret = resp.session_secret();
  f.interval = resp.heartbeat_interval_s() > 0 ? resp.heartbeat_interval_s() : 1.0;
  // A coordinator that stops answering (stopped, cut off) is noticed within an interval,
  // not gRPC's 5 s; never under 1 s, for a busy one.
  heartbeat_deadline_ =
      std::clamp(std::chrono::milliseconds(static_cast<int64_t>(1000 * f.interval)),
                 std::chrono::milliseconds(1000), std::chrono::milliseconds(5000));
  {
    absl::MutexLock lock(&mu_);
    coordinator_secret_ = resp.coordinator_secret();
    registered_ = true;
  }
  spdlog::info("registered with coordinator {} as {}{}", f.addresses[which], resp.worker_id(),
               f.epoch > 0 ? absl::StrCat(" (leader epoch ", f.epoch, ")") : std::string());
}

bool WorkerServer::FollowNewLeader(Following& f, const grpc::Status& why) {
  for (size_t k = 1; k < f.stubs.size(); ++k) {
    const size_t other = (f.current + k) % f.stubs.size();
    v1::RegisterResponse resp;
    if (RegisterWith(f, other, &resp).ok()) {
      spdlog::warn("coordinator {} does not answer ({}); {} leads now", f.addresses[f.current],
                   why.error_message(), f.addresses[other]);
      Follow(f, other, resp);
      return true;
    }
  }
  return false;
}

void WorkerServer::RegistrationLoop() {
  using Clock = std::chrono::steady_clock;
  Following f;
  f.addresses = absl::StrSplit(options_.coordinator, ',', absl::SkipWhitespace());
  for (const std::string& a : f.addresses) f.stubs.push_back(v1::Coordinator::NewStub(MakeChannel(a)));
  RegistrationLog log(options_.coordinator);
  const bool exit_on_loss = options_.on_coordinator_loss == WorkerOptions::CoordinatorLoss::kExit;
  // A worker that never registers gives up at this time (with kExit).
  const auto give_up_at = Clock::now() + options_.register_timeout;
  bool gave_up = false;
  // Since when the coordinator we registered with has not answered (none while it does).
  std::optional<Clock::time_point> silent_since;
  bool ever_registered = false, orphaned = false;
  auto lost_contact = [&](const std::string& why) {
    const auto now = Clock::now();
    if (!ever_registered || orphaned) return;
    if (!silent_since) silent_since = now;
    if (now - *silent_since < options_.coordinator_grace) return;
    orphaned = true;
    spdlog::warn("coordinator {} has not answered for {} ms ({}): unloading the stage{}",
                 options_.coordinator, options_.coordinator_grace.count(), why,
                 exit_on_loss ? " and exiting (--on-coordinator-loss exit)"
                              : "; waiting for a coordinator (--on-coordinator-loss wait)");
    host_->Unload(0).IgnoreError();
    if (exit_on_loss && options_.on_coordinator_lost) options_.on_coordinator_lost();
  };
  auto followed = [&] {  // after Follow(): the log and the grace clock start afresh
    log.Registered();
    ever_registered = true;
    silent_since.reset();
    if (orphaned) {
      orphaned = false;
      spdlog::info("a coordinator answers again at {}", f.addresses[f.current]);
    }
  };
  bool quick = false;  // try again soon: the next coordinator, or a heartbeat that failed
  for (;;) {
    std::chrono::milliseconds wait = log.backoff();
    if (quick) {
      wait = kFirstRegisterBackoff;
    } else if (f.registered) {
      wait = std::chrono::milliseconds(static_cast<int64_t>(1000 * f.interval));
    } else if (exit_on_loss && !ever_registered && !gave_up) {
      wait = std::min(wait, std::max(std::chrono::milliseconds(0),
                                     std::chrono::duration_cast<std::chrono::milliseconds>(
                                         give_up_at - Clock::now())));
    }
    quick = false;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&shutdown_), absl::FromChrono(wait))) return;
    }
    if (!f.registered && exit_on_loss && !ever_registered && !gave_up &&
        Clock::now() >= give_up_at) {
      gave_up = true;
      spdlog::error(
          "could not register with the coordinator at {} within {} s ({}): giving up "
          "(--on-coordinator-loss exit, --register-timeout-s)",
          options_.coordinator, options_.register_timeout.count() / 1000.0,
          log.last_error().empty() ? "no answer yet" : log.last_error());
      if (options_.on_register_failed) options_.on_register_failed();
      continue;
    }
    if (!f.registered) {
      v1::RegisterResponse resp;
      grpc::Status st = RegisterWith(f, f.current, &resp);
      if (st.ok()) {
        Follow(f, f.current, resp);
        followed();
        continue;
      }
      if (f.stubs.size() > 1) {
        spdlog::debug("registering with {}: {}", f.addresses[f.current], st.error_message());
        quick = !f.Next();
        if (quick) continue;  // the others first; the backoff after a whole round
      }
      log.Failed(st);
      lost_contact(st.error_message());
      continue;
    }
    v1::HeartbeatResponse resp;
    grpc::Status st = SendHeartbeat(*f.stubs[f.current], f.session, f.session_secret, &resp);
    if (st.ok() && !resp.known()) {
      spdlog::warn("coordinator does not know this worker; registering again");
      f.registered = false;
    } else if (!st.ok()) {
      spdlog::debug("heartbeat failed: {}", st.error_message());
      lost_contact(st.error_message());
      // With standbys, whichever leads now is asked at once. Only a leader accepts (a
      // standby refuses while this one's leader holds its lease), so asking never takes
      // the worker from a leader that is alive.
      if (FollowNewLeader(f, st)) followed();
      quick = true;
    } else {
      silent_since.reset();
    }
  }
}

}  // namespace cascade
