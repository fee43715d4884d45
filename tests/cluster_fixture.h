// Test fixture: a real cluster of processes (cascade-coordinator + N cascade-worker) on
// loopback, or with every process in its own network namespace on a bridge the fixture
// creates (and removes). Used by the end-to-end and fault tests.
#ifndef CASCADE_TESTS_CLUSTER_FIXTURE_H_
#define CASCADE_TESTS_CLUSTER_FIXTURE_H_

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "cascade/v1/control_plane.grpc.pb.h"
#include "cascade/v1/data_plane.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/netns_hosts.h"
#include "tests/subprocess.h"

namespace cascade::testing {

struct ClusterOptions {
  std::string model;
  int workers = 3;
  int min_stages = 3;
  bool netns = false;
  std::vector<std::string> coordinator_flags;  // extra flags
  std::vector<std::string> worker_flags;       // extra flags for every worker
  int spares = 0;  // network-namespace hosts made for workers beyond `workers`
  int threads = 1;
  std::string worker_memory = "2GiB";
  // How the test's own channels connect (TLS clusters), and the join token its status
  // queries present.
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  std::string join_token;
};

class Cluster {
 public:
  // Starts the coordinator only; StartWorkers() adds the workers.
  explicit Cluster(const ClusterOptions& o) : o_(o) {
    tag_ = std::to_string(::getpid() % 100000);
    dir_ = ::testing::TempDir() + "/cluster_" + tag_ + "_" + std::to_string(counter_++);
    std::system(("mkdir -p " + dir_).c_str());
    if (o.netns && !SetUpNamespaces()) return;
    port_ = FreePort();
    control_port_ = FreePort();
    const std::string host = o.netns ? Ip(0) : "127.0.0.1";
    address_ = absl::StrCat(host, ":", port_);
    control_address_ = absl::StrCat(host, ":", control_port_);
    std::vector<std::string> args = Prefix(0);
    for (const std::string& a :
         {std::string(CASCADE_COORDINATOR_BIN), std::string("--model"), o.model,
          std::string("--listen"), address_, std::string("--control-listen"), control_address_,
          std::string("--workers"), std::to_string(o.workers),
          std::string("--min-stages"), std::to_string(o.min_stages), std::string("--log-level"),
          std::string("info")}) {
      args.push_back(a);
    }
    for (const auto& f : o.coordinator_flags) args.push_back(f);
    coordinator_ = Subprocess::Start(args, dir_ + "/coordinator.log");
    // Connect only once it listens, so the channel does not start in reconnect backoff.
    WaitForPort(host, port_, std::chrono::seconds(20));
    WaitForPort(host, control_port_, std::chrono::seconds(20));
    // Reconnect quickly: the coordinator may not listen yet when the first call is made.
    grpc::ChannelArguments channel_args;
    channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
    channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
    channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
    channel_ = grpc::CreateCustomChannel(address_, o.credentials, channel_args);
    control_channel_ = grpc::CreateCustomChannel(control_address_, o.credentials, channel_args);
    ok_ = coordinator_ != nullptr;
  }

  ~Cluster() {
    coordinator_.reset();  // first, so that no stream into the workers stays open
    workers_.clear();
    hosts_.reset();
    // The logs have been printed by a failing test; nothing is left behind.
    std::system(("rm -rf " + dir_).c_str());
  }

  bool ok() const { return ok_; }
  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& address() const { return address_; }
  const std::string& control_address() const { return control_address_; }

  void StartWorkers() {
    for (int i = 0; i < o_.workers; ++i) StartWorker(i);
  }

  // Worker `i` (id w<i>); i >= workers adds one beyond the plan's need (a spare). In a
  // network-namespace cluster, host i + 1 must exist (hosts are made for `workers` + spares).
  void StartWorker(int i, const std::vector<std::string>& extra_flags = {}) {
    {
      std::vector<std::string> args = Prefix(i + 1);
      const std::string host = o_.netns ? Ip(i + 1) : "127.0.0.1";
      for (const std::string& a :
           {std::string(CASCADE_WORKER_BIN), std::string("--coordinator"), control_address_,
            std::string("--listen"), host + ":0", std::string("--threads"),
            std::to_string(o_.threads), std::string("--memory"), o_.worker_memory,
            std::string("--id"), absl::StrCat("w", i), std::string("--log-level"),
            std::string("info")}) {
        args.push_back(a);
      }
      for (const auto& f : o_.worker_flags) args.push_back(f);
      for (const auto& f : extra_flags) args.push_back(f);
      workers_.push_back(Subprocess::Start(args, absl::StrCat(dir_, "/worker", i, ".log")));
    }
  }

  // Host `i`'s address (0: the coordinator, 1.. the workers) in a namespace cluster.
  std::string HostIp(int i) const { return o_.netns ? Ip(i) : "127.0.0.1"; }
  // Host `i` drops every packet (a network-namespace cluster only).
  bool CutHost(int i) const { return hosts_ && hosts_->Cut(i); }

  // Polls the health service until SERVING (true) or the timeout.
  bool WaitServing(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Health() == grpc::health::v1::HealthCheckResponse::SERVING) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health() {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    if (!stub->Check(&ctx, req, &resp).ok()) return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    return resp.status();
  }

  std::unique_ptr<v1::Inference::Stub> Inference() { return v1::Inference::NewStub(channel_); }
  std::unique_ptr<v1::Coordinator::Stub> Control() {
    return v1::Coordinator::NewStub(control_channel_);
  }

  v1::ClusterStatusResponse Status() {
    grpc::ClientContext ctx;
    if (!o_.join_token.empty()) ctx.AddMetadata("x-cascade-join-token", o_.join_token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ClusterStatusResponse resp;
    Control()->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &resp);
    return resp;
  }

  std::string Logs() {
    std::string all = "---- coordinator\n" + (coordinator_ ? coordinator_->Log() : "");
    for (size_t i = 0; i < workers_.size(); ++i) {
      all += absl::StrCat("---- worker ", i, "\n", workers_[i]->Log());
    }
    return all;
  }

  Subprocess& worker(int i) { return *workers_[i]; }
  Subprocess& coordinator() { return *coordinator_; }
  const std::string& dir() const { return dir_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  std::shared_ptr<grpc::Channel> control_channel() { return control_channel_; }

 private:
  // Host 0 is the coordinator, 1..N the workers.
  std::string Ns(int host) const { return hosts_->Ns(host); }
  std::string Ip(int host) const { return hosts_->Ip(host); }
  std::vector<std::string> Prefix(int host) const {
    if (!o_.netns) return {};
    return hosts_->Prefix(host);
  }
  bool SetUpNamespaces() {
    hosts_ = std::make_unique<NetnsHosts>(tag_, static_cast<int>(::getpid() % 200) + 20,
                                          o_.workers + o_.spares + 1);
    if (!hosts_->ok()) skip_reason_ = hosts_->why();
    return hosts_->ok();
  }
  ClusterOptions o_;
  std::string tag_, dir_, address_, control_address_, skip_reason_;
  int port_ = 0, control_port_ = 0;
  bool ok_ = false;
  std::unique_ptr<NetnsHosts> hosts_;  // with netns: host 0 the coordinator, 1.. workers
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::shared_ptr<grpc::Channel> channel_, control_channel_;
  static inline int counter_ = 0;
};

}  // namespace cascade::testing

#endif  // CASCADE_TESTS_CLUSTER_FIXTURE_H_
