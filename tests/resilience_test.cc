// Keep serving when a node dies (docs/architecture.md, "Failure model"): clients stream
// without pause while a stage's worker is killed, stopped, or cut off the network, and
// every stream ends with exactly the text an undisturbed run gives; a coordinator told to
// stop finishes what runs first. Real processes, on loopback and in network namespaces.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <set>
#include <sys/wait.h>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "tests/cluster_fixture.h"

namespace cascade {
namespace {

using testing::Cluster;
using testing::ClusterOptions;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Every prompt starts with the same preamble (over two KV blocks), as chat requests start
// with one system prompt: clients that repeat their request are served from the prefix
// cache, before and after a re-plan.
v1::GenerateRequest Request(int client) {
  const char* prompts[] = {"Once upon a time", "The little dog", "In the park", "Tom said",
                           "A big red ball",   "She was happy",  "The sun was", "One day"};
  const std::string preamble =
      "Lily and her mom went to the park. They saw a big tree and a little bird. The bird "
      "sang a happy song. Lily smiled and said hello to the bird. Then they went home. ";
  v1::GenerateRequest req;
  req.set_prompt(preamble + prompts[client % 8]);
  req.set_max_tokens(48);
  req.set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(client % 2 ? 0.9f : 0.0f);
  req.mutable_sampling()->set_top_k(40);
  req.mutable_sampling()->set_seed(500 + client);
  req.mutable_sampling()->set_has_seed(true);
  return req;
}

struct Outcome {
  grpc::Status status;
  std::string text;
};

Outcome Stream(v1::Inference::Stub& stub, const v1::GenerateRequest& req,
            const std::function<void()>& on_token = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse r;
  Outcome o;
  while (reader->Read(&r)) {
    o.text += r.text();
    if (on_token && r.token_ids_size() > 0) on_token();
  }
  o.status = reader->Finish();
  return o;
}

// N clients each send their request again and again until told to stop, checking every
// completed text against the undisturbed reference, and noting when tokens arrive.
class Load {
 public:
  Load(Cluster& cluster, int clients) : cluster_(cluster) {
    auto stub = cluster.Inference();
    for (int i = 0; i < clients; ++i) {
      Outcome ref = Stream(*stub, Request(i));
      EXPECT_TRUE(ref.status.ok()) << ref.status.error_message();
      reference_.push_back(ref.text);
    }
    for (int i = 0; i < clients; ++i) {
      threads_.emplace_back([this, i] {
        auto s = cluster_.Inference();
        while (!stop_.load()) {
          Outcome o = Stream(*s, Request(i), [this] {
            std::lock_guard<std::mutex> lock(mu_);
            last_token_ = Clock::now();
            gaps_.push_back(last_token_);
          });
          std::lock_guard<std::mutex> lock(mu_);
          ++done_;
          if (!o.status.ok()) {
            failures_.push_back(absl::StrCat("client ", i, ": ", o.status.error_message()));
          } else if (o.text != reference_[i]) {
            failures_.push_back(absl::StrCat("client ", i, ": text differs from the reference"));
          }
        }
      });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  // The longest time without any token after `from`.
  double LongestPauseAfter(Clock::time_point from) {
    std::lock_guard<std::mutex> lock(mu_);
    double longest = 0;
    Clock::time_point prev = from;
    for (auto t : gaps_) {
      if (t < from) continue;
      longest = std::max(longest, std::chrono::duration<double>(t - prev).count());
      prev = t;
    }
    return longest;
  }
  std::vector<std::string> failures() {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }
  int completed() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  Cluster& cluster_;
  std::vector<std::string> reference_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Clock::time_point> gaps_;
  Clock::time_point last_token_;
  std::vector<std::string> failures_;
  int done_ = 0;
};

int SoakSeconds(int fallback) {
  const char* env = std::getenv("CASCADE_SOAK_SECONDS");
  return env ? std::atoi(env) : fallback;
}

class Resilience : public ::testing::Test {
 protected:
  void Make(ClusterOptions o) {
    cluster_ = std::make_unique<Cluster>(o);
    if (!cluster_->ok()) GTEST_SKIP() << cluster_->skip_reason();
    cluster_->StartWorkers();
    ASSERT_TRUE(cluster_->WaitServing()) << cluster_->Logs();
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->Logs();
  }
  ClusterOptions Options() {
    ClusterOptions o;
    o.model = testing::BundledModel();
    o.coordinator_flags = {"--kv-sequences", "16", "--max-running", "16"};
    return o;
  }
  // Waits until the cluster has a plan other than `plan` and serves.
  bool WaitReplanned(uint64_t plan, seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      auto s = cluster_->Status();
      if (s.serving() && s.plan_id() != plan) return true;
      std::this_thread::sleep_for(milliseconds(100));
    }
    return false;
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(Resilience, AKilledStageIsReplacedByASpareWhileEightClientsStream) {
  ClusterOptions o = Options();
  o.spares = 1;
  // Speculative decoding on (8 clients draft: kSpecMaxRunning): drafts across the re-plan
  // keep the text the reference run gave.
  o.coordinator_flags.insert(o.coordinator_flags.end(), {"--speculative", "ngram"});
  Make(o);
  cluster_->StartWorker(3);  // registers after the plan: a spare
  const uint64_t plan = cluster_->Status().plan_id();
  Load load(*cluster_, 8);
  const int total = SoakSeconds(60);
  std::this_thread::sleep_for(seconds(total / 3));
  const auto killed = Clock::now();
  cluster_->worker(1).Signal(SIGKILL);
  ASSERT_TRUE(WaitReplanned(plan, seconds(30))) << "no new plan";
  const double recovered = std::chrono::duration<double>(Clock::now() - killed).count();
  const uint64_t hits_at_replan = cluster_->Status().scheduler().prefix_hit_tokens();
  std::this_thread::sleep_for(seconds(total - total / 3));
  load.Stop();
  EXPECT_THAT(load.failures(), ::testing::IsEmpty());
  EXPECT_GT(load.completed(), 16);
  EXPECT_LT(load.LongestPauseAfter(killed), 10.0) << "streams paused too long";
  EXPECT_LT(recovered, 10.0);
  auto status = cluster_->Status();
  std::set<std::string> used;
  for (const auto& st : status.stages()) used.insert(st.worker_id());
  EXPECT_EQ(used, (std::set<std::string>{"w0", "w2", "w3"}));  // the spare took w1's place
  EXPECT_EQ(status.scheduler().failed(), 0u);
  // The new plan's prefix cache served repeated requests too (their text checked above).
  EXPECT_GT(status.scheduler().prefix_hit_tokens(), hits_at_replan);
  std::cerr << "recovered in " << recovered << " s; longest pause "
            << load.LongestPauseAfter(killed) << " s; " << load.completed() << " requests\n";
}

// Two replicas of one stage each (--replicas 2): killing one's only worker leaves no plan
// for it, so its streams move to the other replica, which serves throughout.
TEST_F(Resilience, AKilledWorkerInOneOfTwoReplicasCostsNoRequest) {
  ClusterOptions o = Options();
  o.workers = 2;
  o.min_stages = 1;
  // Speculative decoding on: the streams that move go on drafting on the other replica.
  o.coordinator_flags.insert(o.coordinator_flags.end(), {"--replicas", "2", "--routing",
                                                         "least-loaded", "--speculative",
                                                         "ngram"});
  Make(o);
  ASSERT_EQ(cluster_->Status().replicas_size(), 2);
  Load load(*cluster_, 8);
  const int total = SoakSeconds(24);
  std::this_thread::sleep_for(seconds(total / 3));
  // Both replicas serve the load.
  v1::ClusterStatusResponse before = cluster_->Status();
  ASSERT_EQ(before.replicas_size(), 2);
  for (const auto& r : before.replicas()) {
    EXPECT_GT(r.scheduler().completed() + r.scheduler().running(), 0u) << "replica " << r.index();
  }
  // Which replica w1 serves: the other must serve throughout.
  int victim = -1;
  for (const auto& st : before.stages()) {
    if (st.worker_id() == "w1") victim = st.replica();
  }
  ASSERT_GE(victim, 0);
  std::atomic<bool> watching{true};
  std::atomic<int> not_serving{0};
  std::thread health([&] {
    while (watching.load()) {
      if (cluster_->Health() != grpc::health::v1::HealthCheckResponse::SERVING) ++not_serving;
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
  const auto killed = Clock::now();
  cluster_->worker(1).Signal(SIGKILL);
  std::this_thread::sleep_for(seconds(total - total / 3));
  load.Stop();
  watching.store(false);
  health.join();
  EXPECT_THAT(load.failures(), ::testing::IsEmpty());
  EXPECT_EQ(not_serving.load(), 0) << "health left SERVING while the other replica served";
  EXPECT_LT(load.LongestPauseAfter(killed), 10.0) << "streams paused too long";
  const v1::ClusterStatusResponse after = cluster_->Status();
  ASSERT_EQ(after.replicas_size(), 2);
  EXPECT_NE(after.replicas(victim).state(), "serving");
  EXPECT_EQ(after.replicas(1 - victim).state(), "serving");
  EXPECT_EQ(after.scheduler().failed(), 0u);
  // The victim's streams went on on the survivor.
  EXPECT_GT(after.replicas(victim).scheduler().handed_over(), 0u);
  EXPECT_GT(after.replicas(1 - victim).scheduler().resumed(), 0u);
  // The survivor finished requests after the kill: those it took over and new ones.
  EXPECT_GT(after.replicas(1 - victim).scheduler().completed(),
            before.replicas(1 - victim).scheduler().completed());
  std::cerr << load.completed() << " requests; longest pause "
            << load.LongestPauseAfter(killed) << " s; "
            << after.replicas(victim).scheduler().handed_over() << " handed over\n";
}

TEST_F(Resilience, WithoutASpareTheRemainingWorkersCarryOn) {
  Make(Options());
  const uint64_t plan = cluster_->Status().plan_id();
  Load load(*cluster_, 4);
  std::this_thread::sleep_for(seconds(3));
  cluster_->worker(2).Signal(SIGKILL);
  ASSERT_TRUE(WaitReplanned(plan, seconds(30)));
  std::this_thread::sleep_for(seconds(3));
  load.Stop();
  EXPECT_THAT(load.failures(), ::testing::IsEmpty());
  EXPECT_EQ(cluster_->Status().stages_size(), 2);
}

TEST_F(Resilience, WhenNothingFitsRequestsEndUnavailableAndANewWorkerBringsItBack) {
  ClusterOptions o = Options();
  o.worker_memory = "16MiB";  // three hold this (F32) cache; two do not
  o.coordinator_flags = {"--kv-sequences", "40", "--kv-type", "f32", "--max-running", "16"};
  Make(o);
  ASSERT_EQ(cluster_->Status().stages_size(), 3);
  auto stub = cluster_->Inference();
  cluster_->worker(0).Signal(SIGKILL);
  // Every request ends, saying why; none hangs.
  Outcome o1;
  for (int i = 0; i < 100; ++i) {
    o1 = Stream(*stub, Request(0));
    if (o1.status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        o1.status.error_message().find("no plan fits") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_EQ(o1.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(o1.status.error_message(), ::testing::HasSubstr("no plan fits"));
  cluster_->StartWorker(3);
  ASSERT_TRUE(cluster_->WaitServing(seconds(60))) << cluster_->Logs();
  EXPECT_TRUE(Stream(*stub, Request(0)).status.ok());
}

TEST_F(Resilience, AStoppedWorkerIsNoticedWithinFiveSecondsAndComesBackAsASpare) {
  ClusterOptions o = Options();
  o.spares = 1;
  Make(o);
  cluster_->StartWorker(3);
  const uint64_t plan = cluster_->Status().plan_id();
  Load load(*cluster_, 4);
  std::this_thread::sleep_for(seconds(2));
  const auto stopped = Clock::now();
  cluster_->worker(1).Signal(SIGSTOP);
  ASSERT_TRUE(WaitReplanned(plan, seconds(30)));
  const double noticed = std::chrono::duration<double>(Clock::now() - stopped).count();
  EXPECT_LT(noticed, 10.0);
  cluster_->worker(1).Signal(SIGCONT);
  std::this_thread::sleep_for(seconds(3));
  load.Stop();
  EXPECT_THAT(load.failures(), ::testing::IsEmpty());
  // w1 is back, told to unload its old stage: idle, waiting as a spare.
  bool idle = false;
  for (int i = 0; i < 100 && !idle; ++i) {
    const v1::ClusterStatusResponse status = cluster_->Status();
    for (const auto& w : status.workers()) {
      idle |= w.worker_id() == "w1" && w.alive() && w.state() == v1::WORKER_STATE_IDLE;
    }
    if (!idle) std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(idle);
  std::cerr << "stopped worker noticed and replaced in " << noticed << " s\n";
}

TEST_F(Resilience, AHostCutOffTheNetworkIsReplaced) {
  ClusterOptions o = Options();
  o.netns = true;
  o.spares = 1;
  Make(o);
  if (IsSkipped()) return;
  cluster_->StartWorker(3);
  const uint64_t plan = cluster_->Status().plan_id();
  Load load(*cluster_, 4);
  std::this_thread::sleep_for(seconds(2));
  // Worker 1's host drops every packet, in and out (nftables in its namespace).
  ASSERT_TRUE(cluster_->CutHost(2));
  const auto cut = Clock::now();
  ASSERT_TRUE(WaitReplanned(plan, seconds(30)));
  const double noticed = std::chrono::duration<double>(Clock::now() - cut).count();
  std::this_thread::sleep_for(seconds(3));
  load.Stop();
  EXPECT_THAT(load.failures(), ::testing::IsEmpty());
  EXPECT_LT(noticed, 10.0);
  std::cerr << "cut-off host noticed and replaced in " << noticed << " s\n";
}

TEST_F(Resilience, SigtermDrainsWithoutCuttingAStream) {
  ClusterOptions o = Options();
  o.coordinator_flags.push_back("--drain-timeout-s");
  o.coordinator_flags.push_back("60");
  Make(o);
  auto stub = cluster_->Inference();
  std::vector<std::thread> clients;
  std::vector<Outcome> outcomes(8);
  std::atomic<int> streaming{0};
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      auto s = cluster_->Inference();
      v1::GenerateRequest r = Request(i);
      r.set_max_tokens(300);
      bool counted = false;
      outcomes[i] = Stream(*s, r, [&] {
        if (!counted) ++streaming;
        counted = true;
      });
    });
  }
  while (streaming.load() < 8) std::this_thread::sleep_for(milliseconds(5));
  cluster_->coordinator().Signal(SIGTERM);
  const auto term = Clock::now();
  // NOT_SERVING at once.
  while (cluster_->Health() == grpc::health::v1::HealthCheckResponse::SERVING &&
         Clock::now() - term < seconds(5)) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const double not_serving = std::chrono::duration<double>(Clock::now() - term).count();
  EXPECT_LT(not_serving, 1.0);
  // New requests are refused while the old ones finish.
  Outcome late = Stream(*stub, Request(0));
  EXPECT_FALSE(late.status.ok());
  for (auto& t : clients) t.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status.error_message();
  }
  // And the coordinator exits 0.
  int status = -1;
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(cluster_->coordinator().pid(), &status, WNOHANG) > 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A worker told to leave with its coordinator (--on-coordinator-loss exit) unloads and
// exits 0 once the coordinator has been silent for the grace period; one told to wait
// unloads and registers with the next coordinator.
TEST_F(Resilience, WorkersOfALostCoordinatorExitOrWaitAsConfigured) {
  ClusterOptions o = Options();
  o.workers = 2;
  o.min_stages = 2;
  o.worker_flags = {"--coordinator-grace-s", "2"};
  cluster_ = std::make_unique<Cluster>(o);
  ASSERT_TRUE(cluster_->ok());
  cluster_->StartWorker(0, {"--on-coordinator-loss", "exit"});
  cluster_->StartWorker(1);  // waits (the default)
  ASSERT_TRUE(cluster_->WaitServing()) << cluster_->Logs();
  cluster_->coordinator().Signal(SIGKILL);
  const auto killed = Clock::now();
  int status = -1;
  while (Clock::now() - killed < seconds(20)) {
    if (::waitpid(cluster_->worker(0).pid(), &status, WNOHANG) > 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  // The grace period and a heartbeat or two: well under 10 s.
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed).count(), 10.0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(cluster_->worker(0).Log().find("unloading the stage and exiting"), std::string::npos)
      << cluster_->worker(0).Log();
  // The other one unloaded and is still there, waiting.
  const auto waiting_deadline = Clock::now() + seconds(10);
  while (cluster_->worker(1).Log().find("waiting for a coordinator") == std::string::npos &&
         Clock::now() < waiting_deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_NE(cluster_->worker(1).Log().find("waiting for a coordinator"), std::string::npos)
      << cluster_->worker(1).Log();
  EXPECT_EQ(::waitpid(cluster_->worker(1).pid(), &status, WNOHANG), 0);
}

}  // namespace
}  // namespace cascade
