// Who may talk to a cluster (docs/architecture.md, "Security"), tried as a stranger on the
// same machine would: every unauthenticated control call and every forged result is
// refused and changes nothing, a taken port stops a second server, and a cluster with mTLS
// serves its members and no one else.
#include <sys/socket.h>

#include <fstream>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "tests/cluster_fixture.h"
#include "tests/pki.h"
#include "transport/address.h"
#include "transport/tcp_wire.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Cluster;
using testing::ClusterOptions;

constexpr char kToken[] = "correct-horse-battery-staple";

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

struct Streamed {
  grpc::Status status;
  std::string text;
};

Streamed Generate(v1::Inference::Stub& stub, int max_tokens, uint64_t seed,
                  const std::function<void(size_t)>& on_tokens = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(0.8f);
  req.mutable_sampling()->set_seed(seed);
  req.mutable_sampling()->set_has_seed(true);
  auto reader = stub.Generate(&ctx, req);
  Streamed out;
  v1::GenerateResponse r;
  size_t n = 0;
  while (reader->Read(&r)) {
    out.text += r.text();
    n += r.token_ids_size();
    if (on_tokens) on_tokens(n);
  }
  out.status = reader->Finish();
  return out;
}

class Secured : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions o;
    o.model = testing::BundledModel();
    const std::string token_file =
        WriteFile(::testing::TempDir() + "/join_token_" + std::to_string(::getpid()), kToken);
    o.coordinator_flags = {"--join-token-file", token_file};
    o.worker_flags = {"--join-token-file", token_file};
    o.join_token = kToken;
    cluster_ = std::make_unique<Cluster>(o);
    ASSERT_TRUE(cluster_->ok());
    cluster_->StartWorkers();
    ASSERT_TRUE(cluster_->WaitServing()) << cluster_->Logs();
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->Logs();
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(Secured, StrangersCannotRegisterHeartbeatOrReadTheStatus) {
  auto control = cluster_->Control();
  v1::RegisterRequest reg;
  reg.set_protocol_version(1);
  reg.set_worker_id("stranger");
  reg.set_listen_address("127.0.0.1:1");
  reg.mutable_resources()->set_memory_bytes(uint64_t{64} << 30);
  for (const char* token : {"", "guess"}) {
    grpc::ClientContext ctx;
    if (*token) ctx.AddMetadata("x-cascade-join-token", token);
    v1::RegisterResponse resp;
    EXPECT_EQ(control->Register(&ctx, reg, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    v1::ClusterStatusResponse resp;
    EXPECT_EQ(control->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // A heartbeat claiming worker w1 failed, from someone without w1's session secret.
  auto status = cluster_->Status();
  {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest hb;
    hb.set_worker_id("w1");
    hb.set_state(v1::WORKER_STATE_FAILED);
    hb.set_error("forged");
    v1::HeartbeatResponse resp;
    for (uint64_t session : {uint64_t{0}, uint64_t{1}}) {
      hb.set_session(session);
      grpc::ClientContext c;
      control->Heartbeat(&c, hb, &resp);
      EXPECT_FALSE(resp.known());
    }
  }
  // Nothing changed: the same plan, serving, w1 not failed, no stranger among the workers.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto after = cluster_->Status();
  EXPECT_TRUE(after.serving());
  EXPECT_EQ(after.plan_id(), status.plan_id());
  for (const auto& w : after.workers()) {
    EXPECT_NE(w.worker_id(), "stranger");
    EXPECT_NE(w.state(), v1::WORKER_STATE_FAILED) << w.worker_id();
  }
}

TEST_F(Secured, StrangersCannotLoadUnloadOrDrainAWorker) {
  auto status = cluster_->Status();
  ASSERT_GT(status.stages_size(), 0);
  auto worker = v1::Worker::NewStub(
      grpc::CreateChannel(status.stages(0).address(), grpc::InsecureChannelCredentials()));
  v1::LoadStageRequest load;
  load.set_model_path("/etc/shadow");
  load.set_num_stages(1);
  load.set_last_layer(5);
  load.set_kv_blocks(1);
  load.set_kv_block_size(16);
  load.set_max_batch_tokens(16);
  load.set_coordinator_address("127.0.0.1:1");
  for (const char* secret : {"", "guess"}) {
    grpc::ClientContext a, b, c;
    if (*secret) {
      a.AddMetadata("x-cascade-coordinator", secret);
      b.AddMetadata("x-cascade-coordinator", secret);
      c.AddMetadata("x-cascade-coordinator", secret);
    }
    v1::LoadStageResponse lr;
    v1::UnloadResponse ur;
    v1::DrainResponse dr;
    EXPECT_EQ(worker->LoadStage(&a, load, &lr).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(worker->Unload(&b, v1::UnloadRequest(), &ur).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(worker->Drain(&c, v1::DrainRequest(), &dr).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  grpc::ClientContext s;
  v1::WorkerStatus ws;
  ASSERT_TRUE(worker->Status(&s, v1::StatusRequest(), &ws).ok());
  EXPECT_EQ(ws.state(), v1::WORKER_STATE_SERVING);
  EXPECT_EQ(ws.plan_id(), status.plan_id());
  auto stub = cluster_->Inference();
  EXPECT_TRUE(Generate(*stub, 8, 1).status.ok());
}

TEST_F(Secured, InjectedResultsDoNotReachAnyonesStream) {
  auto stub = cluster_->Inference();
  const Streamed solo = Generate(*stub, 200, 42);
  ASSERT_TRUE(solo.status.ok());
  // The results port, and the plan id (a stranger who read the status): write results
  // for the batches that are in flight while a victim streams.
  auto status = cluster_->Status();
  std::string results_address;
  {
    // Where the last stage sends results is the coordinator's data port: find it by
    // elimination from its log.
    const std::string log = cluster_->Logs();
    const size_t at = log.find("workers send results to tcp://");
    ASSERT_NE(at, std::string::npos);
    results_address = log.substr(at + 24, log.find(')', at) - at - 24);
  }
  auto target = ParseAddress(results_address);
  ASSERT_TRUE(target.ok()) << results_address;
  std::atomic<bool> stop{false};
  std::atomic<int> injected{0};
  std::thread attacker([&] {
    while (!stop.load()) {
      auto fd = ConnectTcp(target->host_port, std::chrono::seconds(2));
      if (!fd.ok()) continue;
      SocketStream s(std::move(*fd));
      std::string scratch;
      for (uint64_t batch = 1; batch < 400 && !stop.load(); ++batch) {
        v1::StepResult r;
        r.set_plan_id(status.plan_id());
        r.set_batch_id(batch);
        auto* t = r.add_tokens();
        t->set_seq_id(1 + batch % 4);
        t->set_token(300);
        if (!WriteFrame(s, TcpFrameKind::kResult, r, &scratch).ok()) break;
        ++injected;
      }
    }
  });
  const Streamed victim = Generate(*stub, 200, 42);
  stop.store(true);
  attacker.join();
  EXPECT_GT(injected.load(), 0);
  ASSERT_TRUE(victim.status.ok()) << victim.status.error_message();
  EXPECT_EQ(victim.text, solo.text);
}

TEST(Ports, ASecondServerOnATakenPortFailsToStart) {
  ClusterOptions o;
  o.model = testing::BundledModel();
  o.workers = 1;
  o.min_stages = 1;
  Cluster first(o);
  ASSERT_TRUE(first.ok());
  for (const std::string& taken : {first.address(), first.control_address()}) {
    auto second = testing::Subprocess::Start(
        {CASCADE_COORDINATOR_BIN, "--model", testing::BundledModel(), "--listen",
         taken == first.address() ? taken : "127.0.0.1:0", "--control-listen",
         taken == first.control_address() ? taken : "127.0.0.1:0"},
        first.dir() + "/second.log");
    // It exits at once, naming the port; it does not start sharing it.
    bool exited = false;
    for (int i = 0; i < 250 && !exited; ++i) {
      exited = !second->Running();
      if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(exited) << taken;
    // One clear line naming the port and the flag that moves it, not gRPC's error dump.
    EXPECT_THAT(second->Log(), HasSubstr("port " + taken + " is already in use"));
    EXPECT_THAT(second->Log(), HasSubstr(taken == first.address() ? "pass --listen"
                                                                  : "pass --control-listen"));
    EXPECT_THAT(second->Log(), Not(HasSubstr("No address added")));
  }
}

// ---------------------------------------------------------------- mTLS

TEST(MutualTls, MembersServeAndOutsidersAreRefused) {
  using testing::Pki;
  Pki pki(::testing::TempDir() + "/pki_" + std::to_string(::getpid()));
  if (!pki.ok()) GTEST_SKIP() << "the openssl tool could not make certificates";
  ClusterOptions o;
  o.model = testing::BundledModel();
  o.coordinator_flags = pki.Flags("node");
  o.worker_flags = pki.Flags("node");
  grpc::SslCredentialsOptions client;
  client.pem_root_certs = pki.Read("ca.crt");
  client.pem_private_key = pki.Read("node.key");
  client.pem_cert_chain = pki.Read("node.crt");
  o.credentials = grpc::SslCredentials(client);
  Cluster cluster(o);
  ASSERT_TRUE(cluster.ok());
  cluster.StartWorkers();
  ASSERT_TRUE(cluster.WaitServing()) << cluster.Logs();
  auto stub = cluster.Inference();
  const Streamed s = Generate(*stub, 30, 3);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message() << cluster.Logs();
  EXPECT_FALSE(s.text.empty());
  // In plaintext, nothing gets through.
  auto plain = v1::Coordinator::NewStub(
      grpc::CreateChannel(cluster.control_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::RegisterRequest reg;
  reg.set_worker_id("plain");
  reg.set_listen_address("127.0.0.1:1");
  v1::RegisterResponse resp;
  EXPECT_FALSE(plain->Register(&ctx, reg, &resp).ok());
  // A certificate from another CA does not make a member.
  grpc::SslCredentialsOptions other;
  other.pem_root_certs = pki.Read("ca.crt");
  other.pem_private_key = pki.Read("intruder.key");
  other.pem_cert_chain = pki.Read("intruder.crt");
  auto intruder = v1::Coordinator::NewStub(
      grpc::CreateChannel(cluster.control_address(), grpc::SslCredentials(other)));
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  EXPECT_FALSE(intruder->Register(&ctx2, reg, &resp).ok());
  // The data plane too: a plaintext or wrongly certified connection to a stage's TCP port
  // is dropped without a frame read.
  auto status = cluster.Status();
  ASSERT_TRUE(status.serving());
  auto data = ParseAddress(status.stages(0).data_address());
  ASSERT_TRUE(data.ok());
  auto fd = ConnectTcp(data->host_port, std::chrono::seconds(2));
  ASSERT_TRUE(fd.ok());
  const std::string hello = "CSCF plaintext is not welcome here";
  ::send(fd->get(), hello.data(), hello.size(), MSG_NOSIGNAL);
  timeval tv{15, 0};
  ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  ssize_t got;
  do {
    got = ::recv(fd->get(), buf, sizeof(buf), 0);
  } while (got > 0);  // a TLS alert may come first; then the end
  EXPECT_LE(got, 0);
  EXPECT_TRUE(Generate(*stub, 10, 4).status.ok());
}

}  // namespace
}  // namespace cascade
