// The first hour of a new user, with real processes on loopback: a worker that cannot
// load the model does not stop the cluster (it says why and serves once a correct worker
// joins); a coordinator whose own model is missing exits at once naming it; a worker with
// a wrong join token is told so, quietly (backoff, no line per attempt), and with
// --on-coordinator-loss exit gives up by itself with a non-zero status.
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "tests/cluster_fixture.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;
using testing::Cluster;
using testing::ClusterOptions;
using testing::Subprocess;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// Lines of `log` that contain `needle`.
int CountLines(const std::string& log, const std::string& needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) n += absl::StrContains(line, needle);
  return n;
}

ClusterOptions OneWorker() {
  ClusterOptions o;
  o.model = testing::BundledModel();
  o.workers = 1;
  o.min_stages = 1;
  return o;
}

TEST(Startup, AWorkerWithoutTheModelSaysWhyAndACorrectWorkerThatJoinsServes) {
  Cluster cluster(OneWorker());
  ASSERT_TRUE(cluster.ok());
  const std::string empty_dir = cluster.dir() + "/no_models_here";
  ASSERT_EQ(std::system(("mkdir -p " + empty_dir).c_str()), 0);
  cluster.StartWorker(0, {"--model-dir", empty_dir});
  // The load fails; the coordinator does not stop but says why, and waits.
  std::string error;
  const auto deadline = Clock::now() + seconds(30);
  while (Clock::now() < deadline) {
    error = cluster.Status().error();
    if (absl::StrContains(error, "waiting for the workers to change")) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_THAT(error, HasSubstr("on w0")) << cluster.Logs();
  EXPECT_THAT(error, HasSubstr("model folder")) << cluster.Logs();
  EXPECT_THAT(error, HasSubstr("waiting for the workers to change"));
  EXPECT_NE(cluster.Health(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(cluster.coordinator().Running());
  // A request fails naming the reason rather than a bare "not ready".
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::GenerateRequest req;
    req.set_prompt("Once upon a time");
    req.set_max_tokens(4);
    auto reader = cluster.Inference()->Generate(&ctx, req);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    const grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(st.error_message(), HasSubstr("on w0"));
  }
  // A correct worker joins: planned, loaded, serving, and requests run.
  cluster.StartWorker(1);
  ASSERT_TRUE(cluster.WaitServing(seconds(60))) << cluster.Logs();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
  v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(8);
  req.set_ignore_eos(true);
  auto reader = cluster.Inference()->Generate(&ctx, req);
  v1::GenerateResponse r;
  int tokens = 0;
  while (reader->Read(&r)) tokens += r.token_ids_size();
  const grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message() << cluster.Logs();
  EXPECT_EQ(tokens, 8);
  const auto status = cluster.Status();
  ASSERT_EQ(status.stages_size(), 1);
  EXPECT_EQ(status.stages(0).worker_id(), "w1");
}

TEST(Startup, ACoordinatorWithoutItsModelExitsAtOnceNamingIt) {
  const std::string missing = ::testing::TempDir() + "/no_such_model.gguf";
  const std::string log = ::testing::TempDir() + "/coordinator_no_model.log";
  std::remove(log.c_str());
  auto p = Subprocess::Start(
      {CASCADE_COORDINATOR_BIN, "--model", missing, "--listen", "127.0.0.1:0",
       "--control-listen", "127.0.0.1:0"},
      log);
  ASSERT_NE(p, nullptr);
  const int status = p->WaitExit(seconds(10));
  ASSERT_NE(status, -1) << "still running: " << p->Log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  EXPECT_THAT(p->Log(), HasSubstr(missing));
}

TEST(Startup, AWrongJoinTokenIsToldQuietlyAndTheWorkerGivesUpWithAnError) {
  ClusterOptions o = OneWorker();
  const std::string dir = ::testing::TempDir();
  const std::string tag = std::to_string(::getpid());
  o.coordinator_flags = {"--join-token-file",
                         WriteFile(dir + "/right_token_" + tag, "the cluster's token\n")};
  Cluster cluster(o);
  ASSERT_TRUE(cluster.ok());
  const auto started = Clock::now();
  cluster.StartWorker(0, {"--join-token-file", WriteFile(dir + "/wrong_token_" + tag, "a guess\n"),
                          "--on-coordinator-loss", "exit", "--register-timeout-s", "4"});
  const int status = cluster.worker(0).WaitExit(seconds(20));
  const double took = std::chrono::duration<double>(Clock::now() - started).count();
  ASSERT_NE(status, -1) << "the worker did not give up: " << cluster.Logs();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status << cluster.Logs();
  EXPECT_GE(took, 3.5);
  EXPECT_LT(took, 15.0);  // the bound, one attempt's deadline, and the process's start
  const std::string worker_log = cluster.worker(0).Log();
  EXPECT_THAT(worker_log, HasSubstr("does not match"));
  // ~20 attempts at a fixed 200 ms would be ~20 lines; backoff and logging per change of
  // the answer leave one, plus the line that gives up.
  EXPECT_LE(CountLines(worker_log, "regist"), 3) << worker_log;
  const std::string coordinator_log = cluster.coordinator().Log();
  EXPECT_EQ(CountLines(coordinator_log, "refused a registration"), 1) << coordinator_log;
  EXPECT_THAT(coordinator_log, HasSubstr("does not match"));
  EXPECT_TRUE(cluster.coordinator().Running());
}

TEST(Startup, AWorkerWhoseCoordinatorNeverAnswersGivesUpWithAnError) {
  const std::string log = ::testing::TempDir() + "/worker_no_coordinator.log";
  std::remove(log.c_str());
  auto p = Subprocess::Start(
      {CASCADE_WORKER_BIN, "--coordinator", absl::StrCat("127.0.0.1:", testing::FreePort()),
       "--listen", "127.0.0.1:0", "--on-coordinator-loss", "exit", "--register-timeout-s", "3"},
      log);
  ASSERT_NE(p, nullptr);
  const int status = p->WaitExit(seconds(20));
  ASSERT_NE(status, -1) << "the worker did not give up: " << p->Log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status << p->Log();
  EXPECT_LE(CountLines(p->Log(), "does not answer"), 2) << p->Log();
  EXPECT_THAT(p->Log(), HasSubstr("could not register"));
}

}  // namespace
}  // namespace cascade
