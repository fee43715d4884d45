// EtcdClient and LeaderElection against a real etcd (started by the test).
#include "coordinator/leader_election.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"
#include "tests/etcd_process.h"
#include "tests/pki.h"

namespace cascade {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    etcd_ = std::make_unique<testing::EtcdProcess>(::testing::TempDir() + "/etcd_" +
                                                   std::to_string(::getpid()));
    if (!etcd_->ok()) GTEST_SKIP() << etcd_->skip_reason();
    auto c = EtcdClient::Create(etcd_->endpoint());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    // etcd answers once it has elected itself: wait for the first write.
    const auto deadline = Clock::now() + seconds(20);
    while (!client_->Put("/probe", "x").ok() && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  std::unique_ptr<EtcdClient> NewClient() { return *EtcdClient::Create(etcd_->endpoint()); }
  template <typename Pred>
  static bool WaitFor(Pred pred, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return pred();
  }
  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST(EtcdClientEndpoints, MalformedOnesAreRefusedNamingThem) {
  EXPECT_EQ(EtcdClient::Create("").status().code(), absl::StatusCode::kInvalidArgument);
  auto bad = EtcdClient::Create("http://host-without-port");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("host-without-port"), std::string::npos);
  auto https = EtcdClient::Create("https://a:2379");  // TLS needs the CA
  ASSERT_FALSE(https.ok());
  EXPECT_NE(https.status().message().find("--etcd-cacert"), std::string::npos) << https.status();
  EXPECT_FALSE(EtcdClient::Create("a:2379", milliseconds(300), {"", "c.pem", "k.pem"}).ok());
  auto plain = EtcdClient::Create("http://a:2379", milliseconds(300), {"ca.pem", "", ""});
  ASSERT_FALSE(plain.ok());  // a CA asks for TLS; http:// says otherwise
  EXPECT_NE(plain.status().message().find("plain http"), std::string::npos) << plain.status();
  auto unreadable =
      EtcdClient::Create("a:2379", milliseconds(300), {"/nonexistent/ca.pem", "", ""});
  ASSERT_FALSE(unreadable.ok());
  EXPECT_NE(unreadable.status().message().find("/nonexistent/ca.pem"), std::string::npos);
  auto two = EtcdClient::Create("http://a:2379/, b:2380");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ((*two)->endpoints(), (std::vector<std::string>{"a:2379", "b:2380"}));
}

// An etcd that serves TLS and asks for client certificates: a client with the CA and a
// certificate from it reads and writes; one without a certificate, one with a certificate
// of another CA and one without TLS are refused (Unavailable, naming the member).
TEST(EtcdTls, OnlyAClientWithACertificateFromTheCaGetsIn) {
  testing::Pki pki(::testing::TempDir() + "/etcd_pki_" + std::to_string(::getpid()));
  if (!pki.ok()) GTEST_SKIP() << "the openssl tool could not make certificates";
  testing::EtcdProcess etcd(
      ::testing::TempDir() + "/etcd_tls_" + std::to_string(::getpid()), "127.0.0.1",
      {pki.Path("node.crt"), pki.Path("node.key"), pki.Path("ca.crt")});
  if (!etcd.skip_reason().empty()) GTEST_SKIP() << etcd.skip_reason();
  ASSERT_TRUE(etcd.ok()) << etcd.Log();
  const EtcdTls member{pki.Path("ca.crt"), pki.Path("node.crt"), pki.Path("node.key")};
  auto good = EtcdClient::Create("https://" + etcd.endpoint(), seconds(5), member);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE((*good)->Put("/tls/k", "v").ok()) << etcd.Log();
  auto got = (*good)->Get("/tls/k");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->value, "v");
  const EtcdTls no_cert{pki.Path("ca.crt"), "", ""};
  const EtcdTls other_ca{pki.Path("ca.crt"), pki.Path("intruder.crt"), pki.Path("intruder.key")};
  for (const EtcdTls& tls : {no_cert, other_ca, EtcdTls{}}) {
    auto c = EtcdClient::Create(etcd.endpoint(), milliseconds(1500), tls);
    ASSERT_TRUE(c.ok()) << c.status();
    auto refused = (*c)->Get("/tls/k");
    ASSERT_FALSE(refused.ok()) << "client cert " << tls.cert;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
    EXPECT_NE(refused.status().message().find(etcd.endpoint()), std::string::npos);
  }
}

TEST(EtcdClientEndpoints, NoMemberAnsweringIsUnavailableNamingEach) {
  const int a = testing::FreePort(), b = testing::FreePort();
  auto c = EtcdClient::Create(absl::StrCat("127.0.0.1:", a, ",127.0.0.1:", b), milliseconds(300));
  ASSERT_TRUE(c.ok());
  auto got = (*c)->Get("/k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find(absl::StrCat(a)), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find(absl::StrCat(b)), std::string::npos) << got.status();
}

TEST_F(EtcdTest, CreateIfAbsentLetsOneWinAndShowsTheOthersTheWinner) {
  auto lease = client_->GrantLease(seconds(5));
  ASSERT_TRUE(lease.ok()) << lease.status();
  auto first = client_->CreateIfAbsent("/t/leader", "a", *lease);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  auto second = client_->CreateIfAbsent("/t/leader", "b", 0);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->kv.value, "a");
  EXPECT_EQ(second->kv.create_revision, first->kv.create_revision);
  EXPECT_EQ(second->kv.lease, *lease);
  // Guarded writes hold only while the guard is the key that was created.
  EXPECT_TRUE(client_->PutIfGuard("/t/plan", "p1", "/t/leader", first->kv.create_revision).ok());
  EXPECT_EQ(client_->PutIfGuard("/t/plan", "p2", "/t/leader", first->kv.create_revision + 1).code(),
            absl::StatusCode::kFailedPrecondition);
  auto plan = client_->Get("/t/plan");
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_EQ((*plan)->value, "p1");
}

TEST_F(EtcdTest, AKeyGoesWithItsLeaseAndAnExpiredLeaseIsNotFound) {
  auto lease = client_->GrantLease(seconds(2));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(client_->CreateIfAbsent("/t/lapsing", "a", *lease).ok());
  ASSERT_TRUE(client_->KeepAlive(*lease).ok());
  ASSERT_TRUE(client_->RevokeLease(*lease).ok());
  auto gone = client_->Get("/t/lapsing");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
  EXPECT_EQ(client_->KeepAlive(*lease).status().code(), absl::StatusCode::kNotFound);
}

struct Candidate {
  std::atomic<int64_t> elected{0};
  std::atomic<bool> lost{false};
  std::unique_ptr<LeaderElection> election;
};

void Enter(Candidate* c, std::unique_ptr<EtcdClient> etcd, const std::string& name) {
  LeaderElectionOptions o;
  o.prefix = "/cascade/test/";
  o.identity = name;
  o.ttl = seconds(2);
  o.poll = milliseconds(100);
  o.on_elected = [c](int64_t epoch) { c->elected.store(epoch); };
  o.on_lost = [c](const std::string&) { c->lost.store(true); };
  c->election = std::make_unique<LeaderElection>(std::move(etcd), std::move(o));
  c->election->Start();
}

TEST_F(EtcdTest, OneLeadsAndAStandbyTakesOverWithinTheLeaseWhenTheLeaderDies) {
  Candidate a, b;
  Enter(&a, NewClient(), "a");
  ASSERT_TRUE(WaitFor([&] { return a.elected.load() > 0; }, seconds(5)));
  Enter(&b, NewClient(), "b");
  ASSERT_TRUE(WaitFor([&] { return b.election->leader() == "a"; }, seconds(5)));
  EXPECT_FALSE(b.election->leading());
  EXPECT_TRUE(a.election->Offer("plan", "from a").ok());
  EXPECT_EQ(b.election->Offer("plan", "from b").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto p = b.election->Read("plan");
        return p.ok() && p->has_value() && **p == "from a";
      },
      seconds(3)))
      << "the leader's offer was not written";
  // The leader's process dies: its lease is no longer renewed.
  const auto died = Clock::now();
  a.election->Stop();
  ASSERT_TRUE(WaitFor([&] { return b.elected.load() > 0; }, seconds(6)));
  const double took = std::chrono::duration<double>(Clock::now() - died).count();
  EXPECT_LT(took, 4.0) << "a 2 s lease should be taken over within 2 s plus a poll";
  EXPECT_GT(b.elected.load(), a.elected.load()) << "epochs grow with every leader";
  EXPECT_EQ(b.election->leader(), "b");
  auto plan = b.election->Read("plan");
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_EQ(**plan, "from a") << "what the old leader published is there for its successor";
  EXPECT_FALSE(a.lost.load()) << "a stopped election reports nothing";
}

TEST_F(EtcdTest, ALeaderWhoseKeyIsTakenLearnsItAtOnceAndAResignHandsOverWithoutTheLease) {
  Candidate a, b;
  Enter(&a, NewClient(), "a");
  ASSERT_TRUE(WaitFor([&] { return a.elected.load() > 0; }, seconds(5)));
  Enter(&b, NewClient(), "b");
  ASSERT_TRUE(WaitFor([&] { return b.election->leader() == "a"; }, seconds(5)));
  // Resign: the standby leads well before a 2 s lease would lapse.
  const auto resigned = Clock::now();
  a.election->Resign();
  ASSERT_TRUE(WaitFor([&] { return b.elected.load() > 0; }, seconds(3)));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - resigned).count(), 1.0);
  // Someone else's key where b's was (b's lease revoked behind its back): b steps down.
  auto held = client_->Get("/cascade/test/leader");
  ASSERT_TRUE(held.ok() && held->has_value());
  ASSERT_TRUE(client_->RevokeLease((*held)->lease).ok());
  ASSERT_TRUE(client_->Put("/cascade/test/leader", "intruder").ok());
  ASSERT_TRUE(WaitFor([&] { return b.lost.load(); }, seconds(3)));
  EXPECT_FALSE(b.election->leading());
}

TEST_F(EtcdTest, ALeaderLeadsOnWhileEtcdIsDownAndAStandbyCannotWinWithoutIt) {
  Candidate a, b;
  Enter(&a, NewClient(), "a");
  ASSERT_TRUE(WaitFor([&] { return a.elected.load() > 0; }, seconds(5)));
  Enter(&b, NewClient(), "b");
  ASSERT_TRUE(WaitFor([&] { return b.election->leader() == "a"; }, seconds(5)));
  etcd_->Kill();
  std::this_thread::sleep_for(seconds(4));  // two leases' worth
  EXPECT_TRUE(a.election->leading());
  EXPECT_FALSE(a.lost.load());
  EXPECT_FALSE(b.election->leading());
  ASSERT_TRUE(etcd_->Restart());
  ASSERT_TRUE(WaitFor([&] { return client_->Put("/probe", "y").ok(); }, seconds(20)));
  // etcd keeps the lease across its restart (and a renews it): a still leads.
  std::this_thread::sleep_for(seconds(1));
  EXPECT_TRUE(a.election->leading());
  EXPECT_FALSE(a.lost.load());
  EXPECT_FALSE(b.election->leading());
  // And with etcd back, a later takeover works.
  a.election->Stop();
  EXPECT_TRUE(WaitFor([&] { return b.elected.load() > 0; }, seconds(6)));
}

}  // namespace
}  // namespace cascade
