// A standby coordinator (docs/architecture.md, "Standby coordinators"): two coordinators
// elect a leader on etcd, workers follow whichever leads, and clients that resume their
// streams lose nothing when the leader is killed or stopped: every stream ends with the
// text an undisturbed run gives, and a new leader serves new requests within seconds.
// Real processes on loopback, with a real etcd.
#include <signal.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/resuming_stream.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "tests/etcd_process.h"
#include "tests/netns_hosts.h"
#include "tests/subprocess.h"
#include "cascade/v1/control_plane.grpc.pb.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cascade {
namespace {

using testing::Subprocess;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

v1::GenerateRequest Request(int client) {
  const char* prompts[] = {"Once upon a time", "The little dog", "In the park", "Tom said",
                           "A big red ball",   "She was happy",  "The sun was", "One day"};
  v1::GenerateRequest req;
  req.set_prompt(prompts[client % 8]);
  req.set_max_tokens(64);
  req.set_ignore_eos(true);
  // Greedy and sampled; the sampled half without a seed: the first response's is resumed with.
  req.mutable_sampling()->set_temperature(client % 2 ? 0.9f : 0.0f);
  req.mutable_sampling()->set_top_k(40);
  return req;
}

// Two coordinators on one etcd, two workers that follow the leader: on loopback, or each
// process on a host of its own (network namespaces; etcd on the bridge's address).
class Standby : public ::testing::Test {
 protected:
  virtual bool OnHosts() const { return false; }
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/standby_" + std::to_string(::getpid());
    std::system(("mkdir -p " + dir_).c_str());
    std::string etcd_host = "127.0.0.1";
    if (OnHosts()) {
      hosts_ = std::make_unique<testing::NetnsHosts>(absl::StrCat(::getpid() % 100000, "s"),
                                                     static_cast<int>(::getpid() % 200) + 21, 4);
      if (!hosts_->ok()) GTEST_SKIP() << hosts_->why();
      etcd_host = hosts_->BridgeIp();
    }
    etcd_ = std::make_unique<testing::EtcdProcess>(dir_, etcd_host);
    if (!etcd_->ok()) GTEST_SKIP() << etcd_->skip_reason();
    for (int i = 0; i < 2; ++i) {
      public_[i] = absl::StrCat(Host(i), ":", testing::FreePort());
      control_[i] = absl::StrCat(Host(i), ":", testing::FreePort());
    }
    for (int i = 0; i < 2; ++i) StartCoordinator(i);
    for (int i = 0; i < 2; ++i) {
      workers_.push_back(Subprocess::Start(
          On(2 + i, {CASCADE_WORKER_BIN, "--coordinator", control_[0] + "," + control_[1],
                     "--listen", Host(2 + i) + ":0", "--threads", "1", "--memory", "2GiB", "--id",
                     absl::StrCat("w", i), "--log-level", "info"}),
          absl::StrCat(dir_, "/worker", i, ".log")));
    }
    leader_ = WaitLeader(seconds(90));
    ASSERT_GE(leader_, 0) << Logs();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << Logs();
    for (auto& c : coordinators_) c.reset();
    workers_.clear();
    etcd_.reset();
    hosts_.reset();
    std::system(("rm -rf " + dir_).c_str());
  }

  // Host h's address: 0 and 1 the coordinators, 2 and 3 the workers.
  std::string Host(int h) const { return hosts_ ? hosts_->Ip(h) : "127.0.0.1"; }
  std::vector<std::string> On(int h, std::vector<std::string> argv) const {
    if (!hosts_) return argv;
    std::vector<std::string> out = hosts_->Prefix(h);
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }
  void StartCoordinator(int i) {
    coordinators_[i] = Subprocess::Start(
        On(i, {CASCADE_COORDINATOR_BIN, "--model", testing::BundledModel(), "--listen",
               public_[i], "--control-listen", control_[i], "--workers", "2", "--min-stages",
               "2", "--replicas", "1", "--etcd", etcd_->endpoint(), "--cluster-name",
               absl::StrCat("t", ::getpid()), "--kv-sequences", "16", "--max-running", "16",
               "--log-level", "info"}),
        absl::StrCat(dir_, "/coordinator", i, ".log"));
  }

  bool Serving(int i) {
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(public_[i], grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(500));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    return stub->Check(&ctx, req, &resp).ok() &&
           resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }
  // The coordinator that serves (-1 when none does within `timeout`).
  int WaitLeader(Clock::duration timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      for (int i = 0; i < 2; ++i) {
        if (Serving(i)) return i;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
    return -1;
  }
  // How long after `from` a fresh request to `i` first completes (a negative value: not
  // within `timeout`).
  double ServedAfter(int i, Clock::time_point from, Clock::duration timeout) {
    auto stub = v1::Inference::NewStub(
        grpc::CreateChannel(public_[i], grpc::InsecureChannelCredentials()));
    while (Clock::now() - from < timeout) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + seconds(2));
      v1::GenerateRequest req = Request(0);
      req.set_max_tokens(2);
      v1::CompleteResponse resp;
      if (stub->Complete(&ctx, req, &resp).ok()) {
        return std::chrono::duration<double>(Clock::now() - from).count();
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    return -1;
  }
  std::vector<std::string> Publics() const { return {public_[0], public_[1]}; }
  std::string Logs() {
    std::string all;
    for (int i = 0; i < 2; ++i) {
      if (coordinators_[i]) absl::StrAppend(&all, "---- coordinator ", i, "\n", coordinators_[i]->Log());
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      absl::StrAppend(&all, "---- worker ", i, "\n", workers_[i]->Log());
    }
    if (etcd_) absl::StrAppend(&all, "---- etcd\n", etcd_->Log());
    return all;
  }

  std::string dir_;
  std::unique_ptr<testing::NetnsHosts> hosts_;
  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::string public_[2], control_[2];
  std::unique_ptr<Subprocess> coordinators_[2];
  std::vector<std::unique_ptr<Subprocess>> workers_;
  int leader_ = -1;
};

// Clients that stream through GenerateResuming again and again until stopped, each text
// checked against the undisturbed reference.
class ResumingLoad {
 public:
  ResumingLoad(std::vector<std::string> servers, int clients) : servers_(std::move(servers)) {
    for (int i = 0; i < clients; ++i) {
      std::string text;
      // The reference, seeded: what the sampled clients' first runs must reproduce.
      v1::GenerateRequest req = Request(i);
      req.mutable_sampling()->set_seed(900 + i);
      req.mutable_sampling()->set_has_seed(true);
      absl::Status st = Run(req, &text, nullptr);
      EXPECT_TRUE(st.ok()) << st;
      reference_.push_back(text);
    }
    for (int i = 0; i < clients; ++i) {
      threads_.emplace_back([this, i] {
        while (!stop_.load()) {
          v1::GenerateRequest req = Request(i);
          req.mutable_sampling()->set_seed(900 + i);
          req.mutable_sampling()->set_has_seed(true);
          std::string text;
          ResumeStats stats;
          absl::Status st = Run(req, &text, &stats);
          std::lock_guard<std::mutex> lock(mu_);
          ++completed_;
          resumes_ += stats.resumes;
          longest_resume_s_ = std::max(longest_resume_s_, stats.longest_resume_s);
          if (!st.ok()) {
            failures_.push_back(absl::StrCat("client ", i, ": ", st.message()));
          } else if (text != reference_[i]) {
            failures_.push_back(absl::StrCat("client ", i, ": text differs from the reference"));
          }
        }
      });
    }
  }
  ~ResumingLoad() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  int completed() {
    std::lock_guard<std::mutex> lock(mu_);
    return completed_;
  }
  int resumes() {
    std::lock_guard<std::mutex> lock(mu_);
    return resumes_;
  }
  double longest_resume_s() {
    std::lock_guard<std::mutex> lock(mu_);
    return longest_resume_s_;
  }
  std::vector<std::string> failures() {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }

 private:
  absl::Status Run(const v1::GenerateRequest& req, std::string* text, ResumeStats* stats) {
    ResumeOptions o;
    o.stall_timeout = seconds(3);
    o.give_up_after = seconds(30);
    return GenerateResuming(
        servers_, req,
        [text](const v1::GenerateResponse& r) {
          *text += r.text();
          return true;
        },
        o, stats);
  }
  const std::vector<std::string> servers_;
  std::vector<std::string> reference_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  int completed_ = 0, resumes_ = 0;
  double longest_resume_s_ = 0;
  std::vector<std::string> failures_;
};

TEST_F(Standby, TheStandbyRefusesClientsAndWorkersNamingTheLeader) {
  const int standby = 1 - leader_;
  EXPECT_FALSE(Serving(standby));
  auto stub = v1::Inference::NewStub(
      grpc::CreateChannel(public_[standby], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::CompleteResponse resp;
  grpc::Status st = stub->Complete(&ctx, Request(0), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(st.error_message().find("standby"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(control_[leader_]), std::string::npos) << st.error_message();
  // Each says its part in its status.
  for (int i = 0; i < 2; ++i) {
    auto control = v1::Coordinator::NewStub(
        grpc::CreateChannel(control_[i], grpc::InsecureChannelCredentials()));
    grpc::ClientContext c;
    v1::ClusterStatusResponse status;
    ASSERT_TRUE(control->ClusterStatus(&c, v1::ClusterStatusRequest(), &status).ok());
    EXPECT_EQ(status.leadership().role(), i == leader_ ? "leader" : "standby");
    EXPECT_EQ(status.leadership().leader(), control_[leader_]);
    EXPECT_GT(status.leadership().epoch(), 0u);
  }
  // The workers registered with the leader only.
  for (auto& w : workers_) {
    EXPECT_NE(w->Log().find("registered with coordinator " + control_[leader_]), std::string::npos);
  }
}

TEST_F(Standby, AKilledLeaderCostsNoStreamThatResumesAndTheStandbyServesWithinFiveSeconds) {
  ResumingLoad load(Publics(), 8);
  std::this_thread::sleep_for(milliseconds(1500));  // streams in flight
  const int standby = 1 - leader_;
  const auto killed = Clock::now();
  coordinators_[leader_]->Signal(SIGKILL);
  const double served = ServedAfter(standby, killed, seconds(20));
  EXPECT_GE(served, 0) << "the standby never served";
  EXPECT_LT(served, 5.0) << "new requests served " << served << " s after the leader was killed";
  std::this_thread::sleep_for(seconds(3));  // streams go on on the new leader
  load.Stop();
  EXPECT_TRUE(load.failures().empty()) << load.failures().front();
  EXPECT_GT(load.resumes(), 0) << "no stream was cut: the kill came between streams";
  EXPECT_GT(load.completed(), 16);
  std::cerr << "standby served " << served << " s after the kill; " << load.completed()
            << " streams, " << load.resumes() << " resumed, the longest resume "
            << load.longest_resume_s() << " s\n";
  // The workers followed it with their weights: the new plan kept each stage.
  for (auto& w : workers_) {
    EXPECT_NE(w->Log().find("kept for a new plan"), std::string::npos) << "weights reloaded";
  }
}

TEST_F(Standby, AStoppedLeaderIsReplacedAndStandsByOnceItWakes) {
  ResumingLoad load(Publics(), 8);
  std::this_thread::sleep_for(milliseconds(1500));
  const int old = leader_, standby = 1 - leader_;
  const auto stopped = Clock::now();
  coordinators_[old]->Signal(SIGSTOP);
  const double served = ServedAfter(standby, stopped, seconds(30));
  EXPECT_GE(served, 0) << "the standby never served";
  EXPECT_LT(served, 5.0) << "new requests served " << served << " s after the leader stopped";
  coordinators_[old]->Signal(SIGCONT);
  // Awake, it learns from etcd that it lost, stops serving at once and stands by again.
  const auto deadline = Clock::now() + seconds(15);
  while (Clock::now() < deadline &&
         coordinators_[old]->Log().find("standing by for the leadership") ==
             coordinators_[old]->Log().rfind("standing by for the leadership")) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  const std::string log = coordinators_[old]->Log();
  EXPECT_NE(log.find("lost the leadership"), std::string::npos);
  EXPECT_NE(log.find("standing by for the leadership"),
            log.rfind("standing by for the leadership"))
      << "it did not start again as a standby";
  std::this_thread::sleep_for(seconds(2));
  EXPECT_FALSE(Serving(old)) << "two coordinators serve";
  EXPECT_TRUE(Serving(standby));
  load.Stop();
  EXPECT_TRUE(load.failures().empty()) << load.failures().front();
  EXPECT_GT(load.resumes(), 0);
}

TEST_F(Standby, ServingGoesOnWithoutEtcdAndATakeoverWorksOnceItIsBack) {
  etcd_->Kill();
  const auto killed = Clock::now();
  // Only a takeover needs etcd: the leader serves on.
  EXPECT_GE(ServedAfter(leader_, killed, seconds(2)), 0);
  std::this_thread::sleep_for(seconds(4));  // two leases' worth
  const auto later = Clock::now();
  EXPECT_GE(ServedAfter(leader_, later, seconds(2)), 0) << "the leader stopped without etcd";
  EXPECT_FALSE(Serving(1 - leader_));
  ASSERT_TRUE(etcd_->Restart());
  std::this_thread::sleep_for(seconds(2));
  const auto kill = Clock::now();
  coordinators_[leader_]->Signal(SIGKILL);
  const double served = ServedAfter(1 - leader_, kill, seconds(20));
  EXPECT_GE(served, 0) << "no takeover after etcd came back";
  EXPECT_LT(served, 5.0);
}

class StandbyOnHosts : public Standby {
 protected:
  bool OnHosts() const override { return true; }
};

TEST_F(StandbyOnHosts, ALeaderCutOffIsReplacedAndStandsByWhenTheCutHeals) {
  ResumingLoad load(Publics(), 8);
  std::this_thread::sleep_for(milliseconds(1500));
  const int old = leader_, standby = 1 - leader_;
  const auto cut = Clock::now();
  ASSERT_TRUE(hosts_->Cut(old));  // its host drops every packet: etcd, workers, clients
  const double served = ServedAfter(standby, cut, seconds(30));
  EXPECT_GE(served, 0) << "the standby never served";
  EXPECT_LT(served, 5.0) << "new requests served " << served << " s after the cut";
  std::this_thread::sleep_for(seconds(2));
  ASSERT_TRUE(hosts_->Heal(old));
  // Back on the network, the old leader finds its lease gone and stands by: at no time
  // after that do two coordinators serve.
  const auto healed = Clock::now();
  bool deposed = false;
  while (Clock::now() - healed < seconds(10)) {
    EXPECT_TRUE(Serving(standby));
    if (coordinators_[old]->Log().find("lost the leadership") != std::string::npos &&
        !Serving(old)) {
      deposed = true;
      break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(deposed) << "the old leader did not stand down once it could reach etcd";
  std::this_thread::sleep_for(seconds(2));
  EXPECT_FALSE(Serving(old)) << "two coordinators serve";
  EXPECT_TRUE(Serving(standby));
  load.Stop();
  EXPECT_TRUE(load.failures().empty()) << load.failures().front();
  EXPECT_GT(load.resumes(), 0);
  // The workers follow the new leader and never went back.
  for (auto& w : workers_) {
    const std::string log = w->Log();
    EXPECT_EQ(log.rfind("registered with coordinator "),
              log.rfind("registered with coordinator " + control_[standby]));
  }
  std::cerr << "cut-off leader replaced: new requests served " << served << " s after the cut; "
            << load.completed() << " streams, " << load.resumes() << " resumed, the longest "
            << load.longest_resume_s() << " s\n";
}

}  // namespace
}  // namespace cascade
